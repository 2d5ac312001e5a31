"""The stand-in NVML library (fake_nvml.c beside this file), compiled for the lab hosts.

``build(dest_dir)`` compiles it with the controller's C compiler (the hosts are the same
architecture and glibc family) into ``dest_dir/libnvidia-ml.so.1``; ``install(lab, name)`` puts it
where the host's dynamic loader finds it (/usr/lib: a default search folder, no ldconfig needed),
so that nvidia-ml-py on that host loads it as it would load the driver's. The GPUs it reports are
the host's /etc/gpulab-testlab/fake-gpus.json (the stand-in nvidia-smi's file).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "fake_nvml.c"
LIB = "libnvidia-ml.so.1"


def build(dest_dir: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (tests/testlab/install-deps.sh installs gcc)")
    out = Path(dest_dir) / LIB
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(out), str(SOURCE)],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


def install(lab, name: str, lib: Path, gpus_json: str) -> None:
    """The library and the host's fake GPUs (a JSON list) on lab host ``name``."""
    lab.exec(
        name, f"mkdir -p /etc/gpulab-testlab && cat > /etc/gpulab-testlab/fake-gpus.json <<'EOF'\n{gpus_json}\nEOF"
    )
    data = lib.read_bytes().hex()
    lab.exec(
        name,
        f"python3 -c \"import sys; open('/usr/lib/{LIB}', 'wb').write(bytes.fromhex(sys.stdin.read().strip()))\" "
        f"<<'EOF'\n{data}\nEOF",
    )
