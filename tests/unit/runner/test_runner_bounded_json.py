"""Issue 27: JSON the runner reads from files and tools it did not write in this run is bounded
(runner.boundjson): a hostile text is one ValueError line at each reader, never a RecursionError,
MemoryError or traceback."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner import boundjson, bwtools
from runner.datasets import common, prepare

DEEP = "[" * 5000 + "]" * 5000
HUGE_INT = '{"results": [' + "9" * 5000 + "]}"


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet='[]{}":,0123456789-eE.tnrufalsNI \\x', max_size=300))
def test_any_text_is_a_value_or_a_value_error(text):
    try:
        got = boundjson.loads(text)
    except ValueError:
        return
    assert json.loads(text) == got or got != got  # what parses, parses as json does (NaN aside)


@pytest.mark.parametrize(
    "text, says",
    [
        (DEEP, "nested deeper than 64 levels"),
        (HUGE_INT, "an integer of 5000 digits"),
        ("{}" + " " * 100, "more than 50 characters"),
    ],
)
def test_hostile_text_is_refused_before_the_parser(text, says):
    with pytest.raises(ValueError, match=says):
        boundjson.loads(text, limit=50 if len(text) < 200 else boundjson.MAX_CHARS)


def test_brackets_inside_strings_do_not_count():
    assert boundjson.loads(json.dumps({"a": "[" * 500})) == {"a": "[" * 500}


def test_read_stops_at_the_limit(tmp_path):
    f = tmp_path / "big.json"
    f.write_text("[" + "0," * 1000 + "0]")
    with pytest.raises(ValueError, match="more than 100 characters"):
        boundjson.read(f, limit=100)
    with pytest.raises(FileNotFoundError):
        boundjson.read(tmp_path / "absent.json")


@pytest.mark.parametrize("text", [DEEP, HUGE_INT])
def test_a_hostile_tool_output_is_one_line(text):
    for parse in (bwtools.parse_nccl_tests, bwtools.parse_nvbandwidth):
        with pytest.raises(bwtools.ToolOutputError) as exc:
            parse('{"results": ' + text + "}" if text is DEEP else text)
        assert "\n" not in str(exc.value) and len(str(exc.value)) < 300


@pytest.mark.parametrize("text", [DEEP, HUGE_INT, "[1, 2"])
def test_a_hostile_spec_or_manifest_is_one_value_error_line(tmp_path, text):
    (tmp_path / "spec.json").write_text(text)
    with pytest.raises(ValueError) as exc:
        prepare.load_spec(tmp_path / "spec.json")
    assert str(exc.value).startswith(f"{tmp_path / 'spec.json'}: not a JSON dataset spec (") and "\n" not in str(
        exc.value
    )
    (tmp_path / common.MANIFEST).write_text(text)
    with pytest.raises(common.NotPrepared) as exc:
        common.read_manifest(tmp_path)
    assert "unreadable manifest" in str(exc.value) and "\n" not in str(exc.value)


def test_a_hostile_mllog_line_is_skipped_not_a_traceback(tmp_path):
    from runner import mllog

    log = tmp_path / "mlperf.log"
    log.write_text(":::MLLOG " + DEEP + "\n:::MLLOG [1, 2]\n:::MLLOG " + HUGE_INT + '\n:::MLLOG "run_stop"\n')
    assert mllog.has_run_stop(log) is False
    log.write_text(log.read_text() + ':::MLLOG {"key": "run_stop", "value": null}\n')
    assert mllog.has_run_stop(log) is True
