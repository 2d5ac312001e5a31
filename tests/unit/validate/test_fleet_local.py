"""validate_fleet end to end on this machine (ansible_connection=local).

The real path: lab.hosts.remote installs the runner into the host's work
directory, runs `python -m runner burnin --level quick --json` there, reads
the document and judges it. This machine has no NVIDIA GPU and its inventory
(inventory/local.yml: gpu_model and gpu_count auto) expects none, so the host
is validated as a CPU host (PASS, saying why) and never quarantined for it; on
a GPU machine the test is skipped (tests/gpu covers that).
"""

import json

import pytest

from lab.validate import fleet
from lab.hosts.inventory import Host
from runner import probe


def _local_host(tmp_path, **over) -> Host:
    fields = dict(
        name="localhost",
        address="localhost",
        port=22,
        user=None,
        connection="local",
        gpu_model="auto",
        gpu_count="auto",
        stack="current",
        groups=("local",),
        workdir=str(tmp_path / "work"),
        python=None,
        ssh_key=None,
        known_hosts=str(tmp_path / "known_hosts"),
    )
    fields.update(over)
    return Host(**fields)


@pytest.mark.slow
def test_quick_validation_of_this_gpu_less_machine(tmp_path):
    if probe.gather()["gpus"]:
        pytest.skip("this machine has an NVIDIA GPU")
    lines = []
    v = fleet.validate_fleet(
        [_local_host(tmp_path)], level="quick", out_dir=tmp_path / "out", stacks={}, echo=lines.append
    )
    assert v.ok
    h = v.hosts["localhost"]
    assert h["verdict"] == "PASS" and [c["check"] for c in h["checks"]] == ["GPU count"]
    assert "validated as a CPU host" in h["checks"][0]["reason"]
    assert lines[0].startswith("validate: PASS (1 pass, 0 warn, 0 fail of 1 host(s))")
    files = {f.name: f for f in v.files}
    assert set(files) == {"validate.json", "validate.html"}
    assert json.loads(files["validate.json"].read_text())["hosts"]["localhost"]["verdict"] == "PASS"
    assert "validated as a CPU host" in files["validate.html"].read_text()
    # the burn-in document was fetched beside the verdicts
    fetched = json.loads((files["validate.json"].parent / "localhost" / "burnin.json").read_text())
    assert fetched["outcome"] == "no_gpu" and fetched["level"] == "quick"


def test_bad_level_is_config_error(tmp_path):
    from lab.core.errors import ConfigError

    with pytest.raises(ConfigError, match="--level 'slow'"):
        fleet.validate_fleet([_local_host(tmp_path)], level="slow", out_dir=tmp_path / "out", echo=lambda s: None)
