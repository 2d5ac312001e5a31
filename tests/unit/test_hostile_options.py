"""An option given empty, blank or with a control character is refused, never read as "not given".

`--out ''` wrote the report to PATH/report, `--references ''` and `--inventory ''` took the defaults (or the
checkout as an inventory), `--host ''` and `--device ''` selected every host, `--backend ''` took
gpulab.sweep.backend, `--timeout ''` was blamed on gpulab.run_timeout_minutes, `--format html,,md`,
`PATH a,,b`, `history --host/--gpu/--metric/--since ''` dropped the filter, `--url ''` opened the default
database, a `--since` after `--until` showed "no history matches", and `quarantine.add --reason` kept a
terminal's bell or escape. Each is one line now, exit 2, nothing written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.commands import history as hcmd
from lab.commands import report as rcmd
from lab.core import cli
from lab.core.errors import ConfigError
from lab.history import query
from lab.hosts import inventory
from tests.unit import checkout

ROOT = Path(__file__).resolve().parents[2]
# git status of the checkout: under --processes never beside the test lab's tests (tests/sharing.py)
pytestmark = pytest.mark.checkout


LOCAL = ROOT / "inventory" / "local.yml"
sys.path.insert(0, str(ROOT / "tests" / "unit" / "report"))
from report_logs import v05_run, write_lines  # noqa: E402


@pytest.fixture
def place(tmp_path):
    write_lines(tmp_path / "in" / "sweep" / "a.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    (tmp_path / "home").mkdir()
    return tmp_path


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".ansible" not in p.parts)


def invoke(place: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        HOME=str(place / "home"),
        INVOKE_GPULAB_INVENTORY=str(LOCAL),
        INVOKE_GPULAB_RESULTS=str(place / "results"),
        INVOKE_GPULAB_ARTIFACTS=str(place / "artifacts"),
    )
    argv = [a.replace("{P}", str(place)) for a in args]
    before = checkout.state()
    p = subprocess.run(
        [sys.executable, "-m", "invoke", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert checkout.state() == before, "written into the checkout"  # --out ' ' wrote ' /report.html' there
    return p


THROUGHPUT = ("--workloads", "ncf", "--mode", "throughput", "--dry-run")  # a dry run that contacts no host


@pytest.mark.parametrize(
    "args, line",
    [
        (("report", "{P}/in/sweep", "--out", ""), "gpulab: --out: '' is not a path"),
        (("report", "{P}/in/sweep", "--out", " "), "gpulab: --out: ' ' is not a path"),
        (("report", "{P}/in/sweep", "--compare", ""), "gpulab: --compare: '' is not a path"),
        (("report", "{P}/in/sweep,,{P}/in/sweep"), "gpulab: PATH: '|: item 2 is empty"),  # an excerpt
        (("report", "{P}/in/sweep", "--format", "html,,md"), "gpulab: --format: 'html,,md': item 2 is empty"),
        (("report", "{P}/in/sweep", "--format", "md,md"), "gpulab: --format: 'md,md': 'md' is given twice"),
        (("sweep", "--inventory", "", *THROUGHPUT), "gpulab: --inventory: '' is not a path"),
        (("sweep", "--recipe", "", *THROUGHPUT), "gpulab: --recipe: '' is not a path"),
        (("sweep", "--host", "", *THROUGHPUT), "gpulab: --host: '': no item given"),
        (("sweep", "--host", "localhost,", *THROUGHPUT), "gpulab: --host: 'localhost,': item 2 is empty"),
        (("sweep", "--device", "", *THROUGHPUT), f"gpulab: {LOCAL}: unknown device group ''"),
        (("sweep", "--backend", "", *THROUGHPUT), "gpulab: --backend: '' is not one of ssh, slurm, auto"),
        (("sweep", "--timeout", "", *THROUGHPUT), "gpulab: --timeout: '' is not a number"),
        (("validate", "--references", "", "--dcgm-level", "9"), "gpulab: --references: '' is not a path"),
        (("validate", "--out", "", "--dcgm-level", "9"), "gpulab: --out: '' is not a path"),
        (("validate", "--dcgm-level", ""), "gpulab: --dcgm-level: '' is not a DCGM run level"),
        (("tune", "ncf", "--scale", "tiny", "--name", "", "--backend", "slurm"), "gpulab: --name: '' is not a study"),
        (("history", "--url", ""), "gpulab: --url: '' is not a database URL"),
        (("history", "--host", ""), "gpulab: --host: '' is not a host name"),
        (("history", "--gpu", ""), "gpulab: --gpu: '' is neither a GPU UUID"),
        (("history", "--metric", ""), "gpulab: --metric: '' is not a check name"),
        (("history", "--metric", "a\x1b[2Jb"), "gpulab: --metric: 'a\\x1b[2Jb' is not a check name"),
        (("history", "--since", ""), "gpulab: --since: '' is not a date or time"),
        (
            ("history", "--since", "2026-02-01", "--until", "2026-01-01"),
            "gpulab: --since '2026-02-01' is after --until '2026-01-01': no time lies between",
        ),
        (
            ("history.page", "{P}/page.html", "--since", "2026-02-01", "--until", "2026-01-01"),
            "gpulab: --since '2026-02-01' is after --until '2026-01-01'",
        ),
        (  # the default database not made yet: the page took its name, and the next history command failed
            ("history.page", "{P}/results/history.sqlite"),
            "gpulab: history page: {P}/results/history.sqlite is the history database itself",
        ),
        (
            ("history.page", "{P}/h.html", "--url", "sqlite:///{P}/h.html"),
            "gpulab: history page: {P}/h.html is the history database itself",
        ),
        (
            ("quarantine.add", "localhost", "--reason", "a\x07b"),
            "gpulab: quarantine: --reason 'a\\x07b' holds a control",
        ),
        (
            ("quarantine.add", "localhost", "--reason", "x", "--action", "\x1b[31m"),
            "gpulab: quarantine: --action '\\x1b",
        ),
        (("quarantine.add", "localhost", "--reason", "x", "--who", ""), "gpulab: quarantine: --who is required"),
        (("quarantine.release", "localhost", "--note", "\x07"), "gpulab: quarantine: --note '\\x07' holds a control"),
    ],
)
def test_one_line_exit_2_nothing_written(place, args, line):
    before = tree(place)
    p = invoke(place, *args)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, f"exit {p.returncode}: {p.stdout[-800:]}{p.stderr[-1500:]}"
    head, _, tail = line.replace("{P}", str(place)).partition("|")
    assert lines[0].startswith(head) and lines[0].endswith(tail), lines[0]
    assert "Traceback" not in p.stderr + p.stdout
    assert tree(place) == before


def test_check_paths_refuses_an_empty_or_blank_path_option():
    none = lambda key: None  # noqa: E731 - no setting
    for name in ("out", "compare", "references", "inventory", "recipe", "baseline", "space", "root"):
        for v in ("", " "):
            with pytest.raises(ConfigError, match=rf"^--{name}: '{v}' is not a path$"):
                cli.check_paths(none, {name: v})
    with pytest.raises(ConfigError, match=r"^PATH: 'a,,b': item 2 is empty$"):
        cli.check_paths(none, {"path": "a,,b"})
    cli.check_paths(none, {"path": "", "baseline": False})  # a lone empty PATH: the command's own line; a flag


def test_host_selection_refuses_empty_names():
    inv = inventory.load(LOCAL)
    for hosts, said in (("", "'': no item given"), ("localhost,,", "item 2 is empty"), ([""], "no item given")):
        with pytest.raises(ConfigError, match=f"^--host: .*{said}$"):
            inv.select(hosts)
    with pytest.raises(ConfigError, match="unknown device group ''"):
        inv.select(device="")
    assert [h.name for h in inv.select(" localhost ")] == ["localhost"]


def test_report_formats_are_read_strictly(place):
    with pytest.raises(ConfigError, match=r"^--format: 'json,': item 2 is empty$"):
        rcmd.report([place / "in" / "sweep"], out=place / "rep", formats="json,")
    assert not (place / "rep").exists()
    assert rcmd.report([place / "in" / "sweep"], out=place / "rep", formats=" json ").files


def test_history_filters_given_empty_are_refused():
    for gpu in ("", " "):
        with pytest.raises(ConfigError, match="^--gpu: "):
            query.gpu_filter(gpu, "h1")
    with pytest.raises(ConfigError, match="^--since: '' is not a date"):
        query.window("", None)
    with pytest.raises(ConfigError, match="is after --until"):
        query.window("2026-01-02", "2026-01-01T23:59Z")
    assert query.window("2026-01-01", "2026-01-01")[0] is not None


def test_quarantine_texts_a_user_typed_are_one_printable_line(tmp_path):
    url = f"sqlite:///{tmp_path / 'h.sqlite'}"
    for kw, said in (
        ({"reason": "bad\x1b]0;title\x07"}, "--reason"),
        ({"reason": "x", "action": "\x7f"}, "--action"),
        ({"reason": "x", "who": "a\x00b"}, "--who"),
    ):
        with pytest.raises(ConfigError, match=f"^quarantine: {said} .* holds a control character$"):
            hcmd.quarantine_add(url, "localhost", default=False, **kw)
    assert list(tmp_path.iterdir()) == []


LONG = "x" * 5000


@pytest.mark.parametrize(
    "args",
    [
        ("sweep", "--host", LONG, *THROUGHPUT),
        ("sweep", "--device", LONG, *THROUGHPUT),
        ("sweep", "--limit", LONG, *THROUGHPUT),
        ("sweep", "--limit", f"localhost,{LONG}", *THROUGHPUT),
        ("report", "{P}/in/sweep", "--round", LONG),
        ("report", "{P}/in/sweep", "--format", LONG),
        ("validate", "--level", LONG),
        ("validate", "--dcgm-level", LONG),
        ("history", "--url", f"sqlite:///{LONG}"),
    ],
    ids=lambda a: " ".join(x[:12] for x in a[:3]),
)
def test_a_long_value_is_quoted_as_an_excerpt(place, args):
    """README: error lines quote at most a short excerpt of a value (these quoted all 5,000 characters)."""
    before = tree(place)
    p = invoke(place, *args)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("gpulab: "), p.stderr[-600:]
    assert len(lines[0]) < 400 and "x" * 130 not in lines[0], lines[0][:600]
    assert tree(place) == before
