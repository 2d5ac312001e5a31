"""Every external step of `invoke validate` has a hard time limit from the settings
(gpulab.validate.time_limits): the burn-in on a host, DCGM's diagnostic and each standard tool inside the
burn-in; a step past its limit is stopped and reported, never waited for and never a PASS."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from lab.core.errors import ConfigError, RunError
from lab.hosts import remote as rem
from lab.validate import dcgm, gathering


@dataclass
class Res:
    code: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self):
        return self.code == 0


class Remote:
    """What gather_one asks of a host, answered from a script; each call's argv and time limit kept."""

    def __init__(self, burnin: Res, dcgmi: bool = True):
        self.calls, self.burnin, self.dcgmi = [], burnin, dcgmi

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def expand(self, path):
        return path

    def run(self, argv, check=False, timeout=None):
        self.calls.append((argv, timeout))
        text = argv if isinstance(argv, str) else " ".join(argv)
        if "runner burnin" in text or "burnin --level" in text:
            return self.burnin
        if text.startswith("command -v dcgmi"):
            return Res(0, "/usr/bin/dcgmi\ndcgmi  version: 4.2.3\n") if self.dcgmi else Res(1)
        if text.startswith("dcgmi diag"):
            return Res(124, "", "timed out")
        return Res(0, "service: inactive\n")

    def get(self, remote, local):
        raise RunError("not here")


@pytest.fixture
def host(tmp_path):
    from lab.hosts.inventory import Host

    return Host(
        name="h1",
        address="192.0.2.1",
        port=22,
        user="root",
        connection="ssh",
        gpu_model="auto",
        gpu_count="auto",
        stack=None,
        groups=(),
        workdir="/var/lib/gpulab",
        python=None,
        ssh_key=None,
        known_hosts="/dev/null",
    )


@pytest.fixture(autouse=True)
def no_install(monkeypatch):
    monkeypatch.setattr(rem, "ensure_runner", lambda r: rem.RunnerInstall("python3", "/w/runner/x", "v", False))


def test_the_settings_give_every_limit_and_bad_ones_are_one_line():
    assert gathering.burnin_argv("burn-in", "/d", 7, 2.0)[-4:] == ["--tool-timeout", "7", "--minutes", "2"]
    assert "--minutes" not in gathering.burnin_argv("standard", "/d", 7, 2.0)
    lim = gathering.time_limits({"burnin_s": {"quick": 42}, "dcgm_s": {"2": "90"}, "tools_s": 7})
    assert lim["burnin_s"] == {"quick": 42.0, "standard": 3600, "burn-in": 21600}
    assert lim["dcgm_s"][2] == 90.0 and lim["dcgm_s"][3] == 10800 and lim["tools_s"] == 7.0
    for bad, words in (
        ({"tools_s": 0}, "tools_s: 0 is not a number from 1 to 604800 s"),
        ({"burnin_s": {"slow": 1}}, "burnin_s.slow: no such setting"),
        ({"dcgm_s": {"9": 1}}, "dcgm_s.9: no such setting"),
        ({"burnin_s": {"quick": "soon"}}, "burnin_s.quick: 'soon' is not a number"),
        ({"burnin_s": 5}, "burnin_s: 5 is not a mapping of settings"),
        ({"tool_s": 5}, "tool_s: no such setting"),
        ({"burn_minutes": 90}, "burn_minutes: 90 is not a number from 0.1 to 60 minutes"),
    ):
        with pytest.raises(ConfigError, match="^config gpulab.validate.time_limits") as exc:
            gathering.time_limits(bad)
        assert words in exc.value.message


def test_the_burn_in_and_dcgm_run_under_their_limits_and_a_hang_is_reported(host, snap):
    lim = gathering.time_limits({"burnin_s": {"quick": 42}, "dcgm_s": {"1": 9}, "tools_s": 5})
    r = Remote(Res(0, json.dumps(snap, separators=(",", ":")) + "\n"))
    doc = gathering.gather_one(host, "quick", "s1", connect=lambda h: r, dcgm_level=1, limits=lim)
    burn = next((a, t) for a, t in r.calls if "burnin" in a)
    assert burn[1] == 42 and burn[0][-2:] == ["--tool-timeout", "5"]
    diag = next(t for a, t in r.calls if isinstance(a, list) and a[:2] == ["dcgmi", "diag"])
    assert diag == 9 and doc["dcgm"]["error"] == "dcgmi diag -r 1 did not finish within 9 s and was stopped"
    host_recs, _ = dcgm.checks(doc["dcgm"], [0], None)
    assert host_recs[0]["verdict"] == "FAIL" and "did not finish within 9 s" in host_recs[0]["reason"]
    hung = Remote(Res(124, "", "timed out after 42 s"))
    with pytest.raises(RunError, match=r"runner burnin --level quick did not end within 42 s .*and was stopped"):
        gathering.gather_one(host, "quick", "s1", connect=lambda h: hung, limits=lim)


def test_the_runner_takes_the_tools_limit(tmp_path):
    from runner import cli

    out = tmp_path / "o"
    assert cli.main(["burnin", "--out", str(out), "--tool-timeout", "0"]) == 2 and not out.exists()
