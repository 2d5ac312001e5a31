#!/usr/bin/env bash
# What a device call of benchmarks/gpu_session.sh carries: run here, where PyPI answers, from the repository
# root. Fills .whl/ (git-ignored; name it in the call's `carry`) with wheels for the GPU machine's Python
# (3.12, x86-64): the runner's metric and logging libraries that machine lacks, and the controller's packages
# for `invoke validate` (benchmarks/stack_readback.requirements.txt). numpy, jinja2, PyYAML and the like are
# there already: their wheels are dropped, so that the machine's own copies stay in use.
# With --nvbandwidth REF it also exports NVIDIA/nvbandwidth at REF from a local mirror (NVB_GIT, a git
# directory) into .src/nvbandwidth (git-ignored too; carry it as well) for the `nvbandwidth` part, and Debian's
# Boost.Program_options debs (about 10 MB) into .src/boost-debs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p .whl
"$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl -r benchmarks/stack_readback.requirements.txt SQLAlchemy==2.0.* alembic \
    "pycocotools>=2.0.7" "mlperf-logging>=4.1" "sacremoses>=0.1" optuna==5.1.0
# what the GPU machine has (KINDS.md: its Python holds PyTorch and its stack): keep its own
rm -f .whl/numpy-* .whl/Jinja2-* .whl/jinja2-* .whl/MarkupSafe-* .whl/markupsafe-* .whl/PyYAML-* .whl/pyyaml-* \
      .whl/typing_extensions-* .whl/packaging-* .whl/pytest-* .whl/pytest_* .whl/pluggy-* .whl/iniconfig-* \
      .whl/pygments-* .whl/scipy-* .whl/pandas-* .whl/python_dateutil-* .whl/tzdata-* .whl/six-*   # the machine has them; 64 MiB travel
du -sh .whl
if [ "${1:-}" = "--nvbandwidth" ]; then
    ref=${2:?--nvbandwidth REF (a tag, e.g. v0.8)}
    : "${NVB_GIT:?NVB_GIT: a git directory of NVIDIA/nvbandwidth (the fetch tool gives one)}"
    rm -rf .src/nvbandwidth && mkdir -p .src/nvbandwidth
    git --git-dir "$NVB_GIT" archive "$ref" | tar -x -C .src/nvbandwidth
    echo "nvbandwidth $ref in .src/nvbandwidth"
    # its one library the GPU machine may lack: Boost.Program_options, as Debian's debs (unpacked there)
    rm -rf .src/boost-debs && mkdir -p .src/boost-debs
    (cd .src/boost-debs && apt-get download libboost1.74-dev libboost-program-options1.74-dev \
        libboost-program-options1.74.0)
fi
