"""A report as a function (invoke report, demo): the inputs and the output folder checked, then
lab.report.build."""

from __future__ import annotations

import os
from pathlib import Path

from lab.core import limits
from lab.core import paths as lab_paths
from lab.core.errors import ConfigError
from lab.report import build
from lab.report.build import ReportResult


def report(
    inputs: list[str | Path],
    *,
    out: str | Path | None = None,
    formats=build.FORMATS,
    compare: str | Path | None = None,
    round: str | None = None,
) -> ReportResult:
    """Read the runs under ``inputs`` (sweep directories, run directories or MLPerf log files) and write the report
    to ``out`` (default: the first input's folder's ``report/``) in ``formats`` (a comma list or a sequence).
    ConfigError for no input, a malformed ``formats`` or an ``out`` that cannot be a folder or lies among the
    inputs, before anything is read."""
    formats = tuple(limits.items(formats, "--format"))  # 'html,,md' or 'html,html': a typo, refused
    found = [Path(p) for p in inputs if str(p).strip()]
    if not found:
        raise ConfigError(
            f"report: {','.join(map(str, inputs))!r}: give a sweep directory, run directories or MLPerf log files"
        )
    first = found[0]
    default = (first if os.path.isdir(first) else first.parent) / "report"
    if out:
        out_dir = lab_paths.folder(out, "--out")
        if lab_paths.real(out_dir) != lab_paths.real(default):  # PATH/report, the default spelled out, is the one
            # folder in an input a report writes: its files are named like no run and no log
            lab_paths.apart(out_dir, [*found, *([compare] if compare else [])], "--out")
    else:  # the default beside the input obeys --out's rule too: no report files spread into /etc or /usr
        what = "report folder (PATH's folder/report; give --out)"
        out_dir = lab_paths.folder(lab_paths.output_root(default, what), what)
    return build.build_report(found, out_dir, formats=formats, compare=Path(compare) if compare else None, round=round)
