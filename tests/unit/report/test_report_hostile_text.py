"""Text read back that no UTF-8 file can hold, through `invoke report` as a user types it.

A folder name of bytes of another encoding (Latin-1, say) reaches Python as lone surrogates ('\\udcff'), and so
does a JSON escape of half a UTF-16 pair ("\\udcff") in status.json, mllog.log or sweep.json. Neither may
stop a report half-written with a traceback: such a run or file is listed as skipped (the report of the
others is written, every file of it UTF-8), and such an input path is one line, exit 2, nothing written.
Names and figures of absurd size read back (a GPU name of megabytes, 1e308 samples) end neither in a
report that seems to hang nor in a figure that cannot be drawn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.core import plaindata
from report_logs import v05_run, write_lines, write_rundir
from runner.rundir import write_sums

ROOT = Path(__file__).resolve().parents[3]


def report(*args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "invoke", "report", *args], cwd=ROOT, env=env, capture_output=True, timeout=300
    )


def written_as_utf8(folder: Path) -> list[str]:
    """The report's files, each checked to be UTF-8 text (figures aside)."""
    names = []
    for f in sorted(folder.rglob("*")):
        if f.is_file() and f.suffix != ".png":
            f.read_bytes().decode("utf-8")
            names.append(f.name)
    return names


def no_traceback(p):
    assert b"Traceback" not in p.stdout + p.stderr, p.stderr.decode(errors="replace")[-3000:]


def test_a_run_folder_whose_name_is_not_utf8_is_skipped_and_the_others_reported(tmp_path):
    study = tmp_path / "study"
    write_rundir(study / "good", seed=1)
    write_rundir(Path(os.fsdecode(os.fsencode(study) + b"/latin-\xe9t\xe9")), seed=2)
    p = report(study)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert "skipped " + str(study) + "/latin-\\udce9t\\udce9: its name is not UTF-8 text" in p.stdout.decode()
    assert {"report.md", "report.html", "summary.json"} <= set(written_as_utf8(study / "report"))


def test_an_input_path_that_is_not_utf8_is_one_line_exit_2_and_writes_nothing(tmp_path):
    bad = os.fsencode(tmp_path) + b"/caf\xe9"
    write_rundir(Path(os.fsdecode(bad)) / "run")
    p = report(bad)
    no_traceback(p)
    lines = p.stderr.decode().splitlines()
    assert p.returncode == 2, p.stderr
    assert lines == [
        f"gpulab: {tmp_path}/caf\\udce9: its name is not UTF-8 text (bytes of another encoding): rename it"
    ]
    assert sorted(os.listdir(bad)) == [b"run"]


def _escape_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    (path.parent / "SHA256SUMS").unlink()
    write_sums(path.parent)  # the run as its host sent it: the sums agree


@pytest.mark.parametrize(
    "file, old, new, skipped",
    [
        ("status.json", '"reason": "', '"reason": "\\udcff', "status.json is not a readable JSON object"),
        ("mllog.log", '"value": "gnmt"', '"value": "gn\\ud800mt"', None),  # unread here, quoted by the checker
    ],
    ids=["status.json", "mllog.log"],
)
def test_a_json_escape_of_a_lone_surrogate_is_no_traceback(tmp_path, file, old, new, skipped):
    study = tmp_path / "study"
    write_rundir(study / "good", seed=1)
    _escape_in(write_rundir(study / "escaped", seed=2) / file, old, new)
    p = report(study)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    if skipped:
        assert f"skipped {study / 'escaped'}: {skipped}" in p.stdout.decode()
    assert {"report.md", "report.html", "summary.json"} <= set(written_as_utf8(study / "report"))


def test_a_sweep_json_with_a_lone_surrogate_is_read_as_unreadable_state(tmp_path):
    sweep = tmp_path / "S"
    write_rundir(sweep / "r740-01" / "gnmt-run", seed=1)
    (sweep / "sweep.json").write_text('{"schema": 1, "name": "S", "hosts": {"r740-01": {"stack": "x\\udcff"}}}')
    p = report(sweep)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert "sweep.json is not a readable JSON object" in p.stdout.decode()
    written_as_utf8(sweep / "report")


@pytest.mark.parametrize("text", ['"\\udcff"', '{"a": ["x\\ud800"]}', '{"\\udc00": 1}', '"\\uDBFF x"'])
def test_plain_json_refuses_a_lone_surrogate(text):
    with pytest.raises(ValueError, match="lone surrogate"):
        plaindata.loads(text)
    with pytest.raises(ValueError, match="lone surrogate"):
        plaindata.raw_decode("::: " + text, 4)


@pytest.mark.parametrize(
    "text, value", [('"\\ud83d\\ude00"', "\U0001f600"), ('"\\\\udcff"', "\\udcff"), ('"caf\\u00e9"', "café")]
)
def test_plain_json_keeps_pairs_and_escaped_backslashes(text, value):
    assert plaindata.loads(text) == value


def test_a_python_literal_with_a_lone_surrogate_is_refused():
    with pytest.raises(ValueError, match="lone surrogate"):
        plaindata.literal("{'platform': '\\udcff'}")


def test_a_gpu_name_of_megabytes_labels_the_report_cut_short_and_in_seconds(tmp_path):
    """manifest.json's GPU name labels the tables and figures: one of 2 MB took matplotlib minutes to draw
    (a report that seemed to hang); it is cut to a line and the report is written at once."""
    study = tmp_path / "study"
    for seed in (1, 2):
        write_rundir(study / f"r{seed}", seed=seed, gpu_name="Tesla " + "V" * (2 << 20))
    p = subprocess.run(
        [sys.executable, "-m", "invoke", "report", study, "--format", "json,md,html"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        timeout=60,
    )
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    labels = {r["system"] for r in json.loads((study / "report" / "summary.json").read_text())["records"]}
    assert len(labels) == 1 and len(labels.pop()) < 200, labels


def test_a_logged_sample_count_past_the_float_range_makes_no_throughput_and_no_traceback(tmp_path):
    """A v0.5 log's preproc_num_train_examples of 1e308 made a throughput the figures drew as inf ("Axis limits
    cannot be NaN or Inf"); such a run has no throughput, and the report with its figures is written."""
    study = tmp_path / "study"
    write_lines(study / "V100-PCIe_x1" / "gnmt_seed1.log", v05_run("gnmt", seed=1, samples=3_600_000))
    write_lines(study / "V100-PCIe_x3" / "gnmt_seed2.log", v05_run("gnmt", seed=2, samples=1e308, epoch_s=1e-3))
    p = report(study)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    records = json.loads((study / "report" / "summary.json").read_text())["records"]
    assert sorted(str(r["throughput_mean"])[:4] for r in records) == ["3600", "None"]  # 36,000 samples/s; none of 1e308
    assert list((study / "report" / "figures").glob("*.png"))


def test_a_benchmark_name_with_markdown_and_line_breaks_keeps_every_table_row_whole(tmp_path):
    """A log names its benchmark: `|`, a carriage return, an escape sequence, HTML and a backtick in that name
    and in the run's folder stay inside their table cell of report.md (no row split or cut into more cells, no
    raw HTML, no ESC) and draw no missing-glyph warnings."""
    study = tmp_path / "study"
    hostile = "resnet|x\r| a | b\x1b[31m<script>"
    write_rundir(study / "run`1", benchmark=hostile, seed=1)
    write_rundir(study / "good", seed=2)
    p = report(study)
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    assert b"Glyph" not in p.stderr, p.stderr.decode()[-2000:]
    text = (study / "report" / "report.md").read_text()
    assert "<script" not in text and "\x1b" not in text and "\r" not in text
    rows = [line for line in text.splitlines() if "resnet" in line and line.startswith("| ")]
    assert rows, text
    for row in rows:  # each row of a table has as many unescaped | as its table's header line
        header = next(
            h for h in reversed(text[: text.index(row)].splitlines()) if h.startswith("| ") and "---" not in h
        )
        cells = lambda line: len(line.replace("\\|", "")) - len(line.replace("\\|", "").replace("|", ""))  # noqa: E731
        assert cells(row) == cells(header), (header, row)
    assert "``" + str(study / "run`1") + "``" in text


def test_a_name_that_starts_like_a_spreadsheet_formula_is_text_in_the_csv_tables(tmp_path):
    """tables/*.csv are opened in spreadsheets: a benchmark or host name read from a log that starts with
    '=' (=HYPERLINK(...)) or '@' is written with a leading quote; numbers stay numbers."""
    import csv

    study = tmp_path / "study"
    write_rundir(study / "a", benchmark='=HYPERLINK("http://x","y")', host="@host", seed=1)
    p = report(study, "--format", "csv")
    no_traceback(p)
    assert p.returncode == 0, p.stderr
    cells = [
        c for f in sorted((study / "report" / "tables").glob("*.csv")) for row in csv.reader(f.open()) for c in row
    ]
    assert '\'=HYPERLINK("http://x","y")' in cells and "'@host" in cells
    assert not [c for c in cells if c[:1] in ("=", "@", "+")], [c for c in cells if c[:1] in ("=", "@", "+")]
