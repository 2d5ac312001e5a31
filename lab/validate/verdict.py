"""Verdict words and records of `invoke validate`: PASS, WARN and FAIL, one check's
record (measured value, expected range, reason), a metric judged against a
reference ``(value, lower, upper, warn_lower, warn_upper, unit)``, and the
``Verdicts`` a validation returns, and their outputs (validate.json,
validate.html from templates/validate.html.j2, the summary lines). The checks are
lab.validate.gpuchecks, the references lab.validate.gpurefs, the orchestration lab.validate.fleet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from lab.core import templates, term, writes
from lab.core.errors import line_of

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
_RANK = {PASS: 0, WARN: 1, FAIL: 2}
NO_GPU = "no NVIDIA GPU"

# metrics of `runner burnin`, all "higher is better"
GPU_METRICS = (
    "matmul_fp32_tflops",
    "matmul_tf32_tflops",
    "matmul_bf16_tflops",
    "matmul_fp16_tflops",
    "memory_bandwidth_gbs",
    "h2d_bandwidth_gbs",
    "d2h_bandwidth_gbs",
    "resnet50_images_per_s",
)
HOST_METRICS = ("nccl_allreduce_busbw_gbs", "nccl_tests_busbw_gbs")
UNITS = {
    "matmul_fp32_tflops": "TFLOP/s",
    "matmul_tf32_tflops": "TFLOP/s",
    "matmul_bf16_tflops": "TFLOP/s",
    "matmul_fp16_tflops": "TFLOP/s",
    "memory_bandwidth_gbs": "GB/s",
    "h2d_bandwidth_gbs": "GB/s",
    "d2h_bandwidth_gbs": "GB/s",
    "resnet50_images_per_s": "images/s",
    "nccl_allreduce_busbw_gbs": "GB/s",
    "load_power_w": "W",
    "nccl_tests_busbw_gbs": "GB/s",
    "nvbandwidth_h2d_gbs": "GB/s",
    "nvbandwidth_d2h_gbs": "GB/s",
    "nvbandwidth_d2d_read_gbs": "GB/s",
}


def worst(verdicts: Iterable[str]) -> str:
    out = PASS
    for v in verdicts:
        if _RANK[v] > _RANK[out]:
            out = v
    return out


def host_field(host: Any, name: str, default=None):
    if isinstance(host, dict):
        return host.get(name, default)
    return getattr(host, name, default)


# --------------------------------------------------------------------------- verdict records


@dataclass
class Verdicts:
    """The outcome of a validation (plain data in ``data``)."""

    data: dict
    files: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(h["verdict"] != FAIL for h in self.data["hosts"].values())

    @property
    def hosts(self) -> dict:
        return self.data["hosts"]

    def to_json(self) -> str:
        return json.dumps(self.data, indent=2, sort_keys=True, default=str)


def fmt_value(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.0f}"
        return f"{v:.3g}"
    return str(v)


def check(name: str, verdict: str, measured: Any, expected: str, reason: str, unit: str | None = None, **extra) -> dict:
    rec = {
        "check": name,
        "verdict": verdict,
        "measured": measured,
        "expected": expected,
        "unit": unit,
        "reason": reason,
    }
    rec.update(extra)
    return rec


def ref_range(ref: dict) -> dict:
    """FAIL and WARN bounds of a reference metric (None: open)."""
    v = ref["value"]

    def lo(f):
        return None if f is None else v * (1 - f)

    def hi(f):
        return None if f is None else v * (1 + f)

    return {
        "fail_lo": lo(ref.get("lower")),
        "fail_hi": hi(ref.get("upper")),
        "warn_lo": lo(ref.get("warn_lower")),
        "warn_hi": hi(ref.get("warn_upper")),
    }


def range_text(lo, hi, unit) -> str:
    u = f" {unit}" if unit else ""
    if lo is not None and hi is not None:
        return f"{fmt_value(lo)}..{fmt_value(hi)}{u}"
    if lo is not None:
        return f">= {fmt_value(lo)}{u}"
    if hi is not None:
        return f"<= {fmt_value(hi)}{u}"
    return "any"


def judge_metric(name: str, measured: float, ref: dict, label: str | None = None) -> dict:
    r = ref_range(ref)
    unit = ref["unit"]
    label = label or name
    expected = range_text(r["fail_lo"], r["fail_hi"], unit)
    src = ref["source"]
    of = f"({percent(measured, ref['value'])} of {fmt_value(ref['value'])}; {src})"
    for verdict, bound, below, words in (
        (FAIL, "fail_lo", True, "is below"),
        (FAIL, "fail_hi", False, "is above"),
        (WARN, "warn_lo", True, "is low: below"),
        (WARN, "warn_hi", False, "is high: above"),
    ):
        limit = r[bound]
        if limit is not None and (measured < limit if below else measured > limit):
            return check(
                label,
                verdict,
                measured,
                expected,
                f"{fmt_value(measured)} {unit} {words} {fmt_value(limit)} {of}",
                unit,
            )
    return check(
        label,
        PASS,
        measured,
        expected,
        f"{percent(measured, ref['value'])} of reference {fmt_value(ref['value'])} {unit} ({src})",
        unit,
    )


def percent(a, b) -> str:
    return f"{100.0 * a / b:.0f}%" if b else "-"


# --------------------------------------------------------------------------- output


def render_html(verdicts: Verdicts) -> str:
    env = templates.environment()
    env.filters["fmt"] = _fmt_any
    return env.get_template("validate.html.j2").render(v=verdicts.data)


def _fmt_any(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt_any(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt_any(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return fmt_value(value)


# characters of one reason on the terminal (lab.core.errors.line_of: what a host's tool printed, a newline
# that would start a line of its own, an escape sequence, a megabyte, never as it came); validate.json and
# validate.html keep it whole
SHOWN = 400


def summary_text(verdicts: Verdicts) -> str:
    d = verdicts.data
    lines = [
        f"validate: {term.verdict(d['verdict'])} ({d['summary']['PASS']} pass, {d['summary']['WARN']} warn, "
        f"{d['summary']['FAIL']} fail of {d['summary']['hosts']} host(s))"
    ]
    for name, h in d["hosts"].items():  # the word is the verdict; colour only where a terminal wants it
        lines.append(f"{term.verdict(h['verdict'], 4)}  {line_of(name, SHOWN)}: {line_of(h['reason'], SHOWN)}")
        for r in h["reasons"][1:6]:
            lines.append(f"      {line_of(r, SHOWN)}")
        if len(h["reasons"]) > 6:
            lines.append(f"      ... {len(h['reasons']) - 6} more")
        for a in h.get("actions", [])[:3]:
            keep = f" (keep: {', '.join(a['evidence'])})" if a["kind"] == "rma" and a["evidence"] else ""
            lines.append(f"      action for {line_of(a['where'], SHOWN)}: {a['kind']}: {a['do']}{keep}")
        if len(h.get("actions", [])) > 3:
            lines.append(f"      ... {len(h['actions']) - 3} more actions in validate.html")
    return "\n".join(lines)


def write_outputs(verdicts: Verdicts, out_dir: Path) -> list[Path]:
    j = out_dir / "validate.json"
    h = out_dir / "validate.html"
    writes.writable(out_dir, files=[j.name, h.name], what="--out")
    writes.folder(out_dir, "--out")
    writes.write_text(j, verdicts.to_json() + "\n", "--out")
    writes.write_text(h, render_html(verdicts), "--out")
    return [j, h]
