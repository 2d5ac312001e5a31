"""Numbers with a type and a range, depth and size bounded before parsing, path options checked where they enter.

The classes of issue 27: integers of hundreds of digits in a log line, an
entry.json or a status.json; v0.5 values that parse as something other than
plain data (``1+2j``); JSON nested 100,000 deep; YAML alias bombs and absurd
counts in gpulab_* inventory variables; path options with names over 255
bytes or symbolic-link loops. Each is one clean refusal (a ValueError the
caller turns into its reason, or a ConfigError line), never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.core import paths, plaindata, schema
from lab.core.errors import ConfigError
from lab.hosts import inventory
from lab.results import resulttree
from lab.results.logfacts import value_of
from lab.results.mllog import decode_mllog

ROOT = Path(__file__).resolve().parents[2]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

BRACKETS = st.sampled_from([("[", "]"), ('{"a":', "}"), ("[[", "]]")])


@FAST
@given(
    depth=st.one_of(st.integers(0, 200), st.sampled_from([1000, 100_000])),
    pair=BRACKETS,
    how=st.sampled_from(["loads", "literal", "raw"]),
)
def test_any_depth_parses_or_is_a_value_error(depth, pair, how):
    opening, closing = pair
    text = opening * depth + "1" + closing * depth
    levels = depth * (2 if opening == "[[" else 1)
    parse = {"loads": plaindata.loads, "literal": plaindata.literal, "raw": lambda t: plaindata.raw_decode(t, 0)[0]}[
        how
    ]
    if how == "literal" and opening.startswith("{"):
        text = text.replace('"a":', "'a':")
    if levels <= plaindata.MAX_DEPTH:
        parse(text)
    else:
        with pytest.raises(ValueError, match="nested deeper"):
            parse(text)


@FAST
@given(digits=st.integers(1, 2000), sign=st.sampled_from(["", "-"]), how=st.sampled_from(["loads", "literal"]))
def test_integers_have_a_range_wherever_they_are_parsed(digits, sign, how):
    text = sign + "9" * digits
    parse = plaindata.loads if how == "loads" else plaindata.literal
    if digits <= plaindata.MAX_INT_DIGITS:
        assert parse(f"[{text}]") == [int(text)]
    else:
        with pytest.raises(ValueError):
            parse(f"[{text}]")


@FAST
@given(
    text=st.sampled_from(
        ["1+2j", "2j", "{1, 2}", "b'x'", "frozenset()", "(1, 2j)", "{'a': 1j}", "...", "1e999j", "[" * 70 + "]" * 70]
    )
)
def test_a_v05_value_that_is_not_plain_data_stays_raw_text(text):
    with pytest.raises(ValueError):
        plaindata.literal(text)
    assert value_of(text) == (text, False)


MLLOG_FIELDS = st.sampled_from(["time_ms", "value", "epoch_num", "seed"])


GOOD_MLLOG = (
    ':::MLLOG {"namespace": "", "time_ms": 1000, "event_type": "POINT_IN_TIME", "key": "run_start", '
    '"value": null, "metadata": {"file": "x.py", "lineno": 1}}'
)


def _with(field: str, value: str) -> str:
    if field in ("time_ms", "value"):
        return GOOD_MLLOG.replace('"time_ms": 1000' if field == "time_ms" else '"value": null', f'"{field}": {value}')
    return GOOD_MLLOG.replace('"lineno": 1', f'"lineno": 1, "{field}": {value}')


@FAST
@given(field=MLLOG_FIELDS, extra=st.integers(1, 1000), depth=st.integers(65, 5000))
def test_a_hostile_mllog_line_is_a_bad_line_and_the_others_count(field, extra, depth):
    # an integer too long to parse anywhere; a time_ms past 10**15 ms (year 33658) is no time either
    digits = (15 if field == "time_ms" else plaindata.MAX_INT_DIGITS) + extra
    deep = GOOD_MLLOG.replace('"value": null', '"value": ' + "[" * depth + "]" * depth)
    events, bad = decode_mllog([GOOD_MLLOG, _with(field, "9" * digits), deep])
    assert len(events) == 1 and bad == [2, 3]


@FAST
@given(t=st.sampled_from(["1e999", "-1e999", "NaN", "Infinity", "-1", '"soon"', "true", "null", "[1]"]))
def test_a_time_ms_that_is_not_a_time_is_a_bad_line(t):
    events, bad = decode_mllog([GOOD_MLLOG, _with("time_ms", t)])
    assert len(events) == 1 and bad == [2]


@FAST
@given(n=st.integers(-(2**64 - 1), 2**64 - 1), field=st.sampled_from(["value", "epoch_num", "seed"]))
def test_every_64_bit_integer_parses(n, field):
    # NVML and DCGM print unsigned 64-bit values; a seed from time.time_ns() has 19 digits
    assert plaindata.loads(f'{{"v": {n}}}') == {"v": n}
    events, bad = decode_mllog([_with(field, str(n))])
    assert not bad and len(events) == 1


@FAST
@given(kind=st.sampled_from(["deep", "int", "kv-deep", "kv-int", "entry-literal"]), n=st.integers(65, 20_000))
def test_a_hostile_systems_or_entry_file_is_a_reason_not_a_traceback(tmp_path, kind, n):
    f = tmp_path / "entry.json"
    text = {
        "deep": "[" * n + "]" * n,
        "int": '{"count": ' + "9" * n + "}",
        "kv-deep": "entry: " + "[" * n + "]" * n,
        "kv-int": 'nodes: {"value": ' + "9" * n + "}",
        "entry-literal": 'entry: {"value": "{\'nodes\': ' + "9" * n + '}"}',
    }[kind]
    f.write_text(text + "\n")
    doc, why = resulttree.read_description(f, tmp_path)
    assert (doc is None and why) or (
        isinstance(doc, dict)
        and all(not isinstance(v, int) or abs(v) < 10**plaindata.MAX_INT_DIGITS for v in doc.values())
    )


def inventory_file(tmp: Path, gpulab_vars: str) -> Path:
    f = tmp / "hosts.yml"
    f.write_text(
        "all:\n  hosts:\n    h1:\n      ansible_host: 127.0.0.1\n      gpulab_gpu_model: T4\n"
        "      gpulab_stack: current\n" + gpulab_vars
    )
    return f


@pytest.mark.parametrize("count", [65, 1000, 1_000_000_000, 10**30, -1, True, 1.5])
def test_gpu_count_has_a_range(tmp_path, count):
    inv = inventory.load(inventory_file(tmp_path, f"      gpulab_gpu_count: {json.dumps(count)}\n"))
    with pytest.raises(ConfigError) as exc:
        inv.select()
    assert "gpulab_gpu_count" in exc.value.message and len(exc.value.message) < 400


def test_a_yaml_alias_bomb_in_a_gpulab_variable_is_refused_quickly(tmp_path):
    levels = ["      gpulab_gpu_count: 4\n      gpulab_pcie: &l0 [x, x, x, x, x, x, x, x, x]\n"]
    for i in range(1, 9):
        levels.append(f"      gpulab_x{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n")
    t0 = time.monotonic()
    inv = inventory.load(inventory_file(tmp_path, "".join(levels)))
    with pytest.raises(ConfigError) as exc:
        inv.select()
    assert time.monotonic() - t0 < 20 and len(exc.value.message) < 400
    assert "YAML aliases" in exc.value.message or "gpulab_" in exc.value.message


def test_schema_check_measures_before_it_walks():
    bomb = ["x"] * 9
    for _ in range(9):
        bomb = [bomb] * 9
    with pytest.raises(ConfigError, match="more than 1000000 values"):
        schema.conform({"gpulab_gpu_model": bomb}, "hostvars", "inv")


@FAST
@given(name_len=st.integers(1, 600), depth=st.integers(1, 3), loop=st.booleans())
def test_path_options_names_and_loops(tmp_path, name_len, depth, loop):
    base = tmp_path / "p"
    base.mkdir(exist_ok=True)
    if loop:
        link = base / "loop"
        if not link.is_symlink():
            link.symlink_to("loop")
        path = str(link) + "/x" * depth
    else:
        path = str(base) + ("/" + "n" * name_len) * depth
    if loop or name_len > 255:
        with pytest.raises(ConfigError) as exc:
            paths.usable(path, "--out")
        assert exc.value.message.startswith("--out: ") and len(exc.value.message) < 200
    else:
        assert paths.usable(path, "--out") == Path(path)


@pytest.mark.parametrize(
    "args, message",
    [
        (["report", "/tmp/" + "x" * 300], "PATH: /tmp/xxx"),
        (["report", "{loop}"], "a symbolic link loop"),
        (["report", "{tmp}", "--out", "{loop}/r"], "--out: "),
        (["report", "{tmp}", "--compare", "/" + "c" * 256], "--compare: "),
        (["collect", "{loop}"], "PATH: "),
        (["sweep", "--inventory", "{loop}", "--dry-run"], "--inventory: "),
    ],
)
def test_path_options_on_the_command_line(tmp_path, args, message):
    (tmp_path / "loop").symlink_to("loop")
    argv = [a.format(loop=tmp_path / "loop", tmp=tmp_path) for a in args]
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(tmp_path))
    r = subprocess.run(
        [sys.executable, "-m", "invoke", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    plants=st.lists(
        st.tuples(
            st.sampled_from(["", "sub", "sub/deeper"]), st.sampled_from(["self-loop", "pair-loop", "up", "x.log-loop"])
        ),
        min_size=1,
        max_size=4,
    )
)
def test_link_loops_in_a_report_input_are_skipped_not_fatal(tmp_path, plants):
    import shutil
    from lab.report.build import build_report

    sys.path.insert(0, str(ROOT / "tests" / "unit" / "report"))
    from report_logs import v05_run, write_lines

    base = tmp_path / "in"
    shutil.rmtree(base, ignore_errors=True)
    write_lines(base / "a.log", v05_run("gnmt", epochs=1, epoch_s=1.0))
    for i, (where, kind) in enumerate(plants):
        folder = base / where
        folder.mkdir(parents=True, exist_ok=True)
        name = folder / f"l{i}"
        if kind == "self-loop":
            name.symlink_to(name.name)
        elif kind == "pair-loop":
            name.symlink_to(f"m{i}")
            (folder / f"m{i}").symlink_to(name.name)
        elif kind == "up":
            name.symlink_to("..")
        else:
            (folder / f"l{i}.log").symlink_to(f"l{i}.log")
    result = build_report([base], tmp_path / "out", formats=("json",))
    assert len(result.summary) == 1
