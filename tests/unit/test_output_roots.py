"""System folders are no output roots, host patterns are checked term by term, errors quote a short excerpt."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.core import paths, schema
from lab.core.errors import ConfigError
from lab.hosts import inventory

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "hosts.yml"  # read only: no host of it is contacted here
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(
    top=st.sampled_from(sorted(paths.SYSTEM_FOLDERS)),
    tail=st.sampled_from(["", "/", "/.", "/x/..", "//"]),
    local=st.booleans(),
)
def test_a_system_folder_is_no_output_root(top, tail, local):
    with pytest.raises(ConfigError, match="is a system folder"):
        paths.output_root(top + tail, "--out", local=local)


@FAST
@given(
    tree=st.sampled_from(paths.SYSTEM_TREES),
    below=st.lists(st.sampled_from(["a", "gpulab", "x.d"]), min_size=1, max_size=3),
)
def test_nothing_below_etc_usr_proc_and_the_like(tree, below):
    with pytest.raises(ConfigError, match="is a system folder"):
        paths.output_root("/".join([tree, *below]), "--out", local=False)


def test_an_own_folder_is_an_output_root(tmp_path):
    assert paths.output_root(tmp_path / "r", "--out") == tmp_path / "r"
    assert paths.output_root("/var/lib/gpulab", "gpulab_workdir", local=False)
    assert paths.output_root("~/.local/share/gpulab", "gpulab_workdir", local=False)


@pytest.fixture(scope="module")
def example():
    return inventory.load(EXAMPLE)


@settings(max_examples=60, deadline=None)
@given(
    terms=st.lists(
        st.tuples(
            st.sampled_from(["", "!", "&", "!!", "&!", "!&&"]),
            st.sampled_from(["", "r740-01", "t4", "v100", "nosuch", "r740-0*"]),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_a_host_pattern_is_checked_term_by_term(example, terms):
    pattern = ":".join(p + t for p, t in terms)
    # an empty term between two ':' is dropped, as Ansible does; '!' or '&' before nothing is not
    bad = all(not p + t for p, t in terms) or any(len(p) > 1 or (p and not t) or t == "nosuch" for p, t in terms)
    try:
        chosen = {h.name for h in example.select(limit=pattern)}
    except ConfigError as exc:
        assert "\n" not in exc.message and "--limit" in exc.message or "pattern" in exc.message
        return
    assert not bad, f"{pattern!r} selected {sorted(chosen)}"
    assert chosen <= set(example.names)


def test_an_error_quotes_an_excerpt_of_a_file_not_the_file(tmp_path):
    big = "root:x:0:0:root:/root:/bin/bash\n" * 200
    with pytest.raises(ConfigError) as exc:
        schema.conform(big, "gpu-references", str(tmp_path / "refs.yml"))
    assert len(exc.value.message) < 200 and "..." in exc.value.message


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["report", "{tmp}", "--out", "/"], {}, "--out: / is a system folder"),
        (["report", "{tmp}", "--out", "/etc/gpulab"], {}, "--out: /etc/gpulab is a system folder"),
        (["report", "/etc/passwd"], {}, "report folder (PATH's folder/report; give --out): /etc/report is a system"),
        (["report", "/usr/lib"], {}, "report folder (PATH's folder/report; give --out): /usr/lib/report is a system"),
        (
            ["sweep", "--device", "v100", "--mode", "throughput", "--dry-run"],
            {"INVOKE_GPULAB_RESULTS": "/etc"},
            "config gpulab.results: /etc is a system folder",
        ),
        (["datasets", "--host", "r740-01", "--names", "ncf", "--root", "/", "--check"], {}, "--root: / is a system"),
        (["sweep", "--limit", "!!!", "--mode", "throughput", "--dry-run"], {}, "is not a valid host pattern"),
        (["validate", "--host", "r740-01", "--references", "/etc/passwd"], {}, "/etc/passwd: "),
    ],
)
def test_on_the_command_line(tmp_path, args, env, message):
    argv = [a.format(tmp=tmp_path) for a in args]
    full = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        HOME=str(tmp_path),
        INVOKE_GPULAB_INVENTORY=str(ROOT / "inventory" / "hosts.yml"),
        **env,
    )
    r = subprocess.run(
        [sys.executable, "-m", "invoke", *argv], cwd=ROOT, env=full, capture_output=True, text=True, timeout=120
    )
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and message in lines[0] and len(lines[0]) < 200, r.stderr


def test_a_reader_that_leaves_early_is_no_traceback(tmp_path):
    """`invoke sweep --dry-run | head -1`: the plan's reader closes the pipe; the task stops as a pipe does."""
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        HOME=str(tmp_path),
        INVOKE_GPULAB_INVENTORY=str(ROOT / "inventory" / "hosts.yml"),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "invoke", "sweep", "--device", "t4", "--mode", "throughput", "--dry-run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # gone before the plan is printed (as `| head -0`, or a head that left early)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err and err == "", err
