"""Comma lists and numbers from the command line read strictly: a typo is refused naming the item, never guessed.

`--gpus 1,,2` was `1,2` (the empty item dropped), `--gpus 1,1` was `1`, `--gpus ٣` (an Arabic-Indic digit,
which Python's int takes) was 3, `--seeds 1_0` was 10, and `--gpus ²` or a 5,000-digit `--gpus` was a
traceback. Each is one line now, exit 2, nothing written (lab.core.limits: ``items``, ``number``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.core import limits
from lab.core.errors import ConfigError
from lab.history import query
from lab.sweep import plan as pl
from lab.validate import dcgm
from tests.unit import checkout

ROOT = Path(__file__).resolve().parents[2]
# git status of the checkout: under --processes never beside the test lab's tests (tests/sharing.py)
pytestmark = pytest.mark.checkout


LOCAL = ROOT / "inventory" / "local.yml"


class Host:  # what parse_gpu_counts reads of a host
    name = "h1"
    gpu_count = 8


@pytest.mark.parametrize(
    "value, message",
    [
        ("1,,2", "--gpus: '1,,2': item 2 is empty"),
        ("1,", "--gpus: '1,': item 2 is empty"),
        (",", "--gpus: ',': item 1 is empty"),
        ("", "--gpus: '': no item given"),
        ("1,1", "--gpus: '1,1': '1' is given twice"),
        ("1,01", "--gpus: '1,01': '01' is given twice"),
        ("\u0663", "--gpus: '\u0663' is not a GPU count (use 1,2,... or all)"),  # ٣, which int() reads as 3
        ("\u00b2", "--gpus: '\u00b2' is not a GPU count"),  # ², a digit to str.isdigit, not to int()
        ("+1", "--gpus: '+1' is not a GPU count"),
        ("-1", "--gpus: '-1' is not a GPU count"),
        ("1.0", "--gpus: '1.0' is not a GPU count"),
        ("2,1_0", "--gpus: '1_0' is not a GPU count"),
        ("9" * 5000, "--gpus: '99999999"),  # beyond int()'s 4300 digits: was a ValueError traceback
        ("99", "--gpus: '99' is not a whole number from 1 to 64 GPUs"),
    ],
)
def test_a_gpu_list_typo_is_refused_naming_the_item(value, message):
    with pytest.raises(ConfigError) as err:
        pl.parse_gpu_counts(value, Host)
    assert err.value.message.startswith(message), err.value.message


def test_a_gpu_list_takes_spaces_around_items_and_all():
    assert pl.parse_gpu_counts(" 1, 2 ", Host) == [1, 2]
    assert pl.parse_gpu_counts(" ALL ", Host) == list(range(1, 9))
    assert pl.parse_gpu_counts(["2", 4], Host) == [2, 4]  # a YAML list


@pytest.mark.parametrize("value", ["\u0663", "1_0", "+3", "\u00b2", "9" * 5000, "3e0", "0x3", "3.5"])
def test_a_count_is_ascii_digits(value):
    with pytest.raises(ConfigError, match=r"^--seeds: .* is not a whole number from 1 to 1000 seeds$"):
        limits.number(value, "--seeds", limits.SEEDS)
    with pytest.raises(ConfigError, match=r"^--seeds: .* is not a number of seeds, 'auto' or 'mlperf'"):
        pl.seed_count(value, "ncf")


def test_a_number_still_reads_what_a_user_types():
    assert limits.number(" 3 ", "--seeds", limits.SEEDS) == 3
    assert limits.number("1.5", "--timeout", limits.RUN_TIMEOUT_MINUTES) == 1.5
    assert limits.number("1e2", "--timeout", limits.RUN_TIMEOUT_MINUTES) == 100.0
    assert pl.seed_count(2.0, "ncf") == 2 and pl.seed_count("2", "ncf") == 2
    for v in ("\u0661\u0660", "1_0", "1e400", "nan", "-inf", "infinity"):
        with pytest.raises(ConfigError, match="is not a number from 0.05 to 10080 minutes"):
            limits.number(v, "--timeout", limits.RUN_TIMEOUT_MINUTES)


@pytest.mark.parametrize(
    "value, detail",
    [
        ("1,,2", ": item 2 is empty"),
        ("1,1", ": '1' is given twice"),
        ("1, 01", ": '01' is given twice"),
        ("\u0663", ""),
        ("1,x", ": item 2 is 'x'"),
    ],
)
def test_a_gpu_setting_is_read_as_the_option(value, detail):
    takes = "is not a comma list of whole numbers from 1 to 64 GPUs or all"
    with pytest.raises(ConfigError) as err:
        limits.counts(value, "config gpulab.gpus", limits.GPUS, ("all",), many=True)
    assert err.value.message == f"config gpulab.gpus: {value!r} {takes}{detail}"


def test_a_workload_list_typo_is_refused():
    with pytest.raises(ConfigError, match=r"^--workloads: 'ncf,,gnmt': item 2 is empty$"):
        pl.parse_list("ncf,,gnmt", "workloads")
    with pytest.raises(ConfigError, match=r"^--workloads: 'ncf,ncf': 'ncf' is given twice$"):
        pl.parse_list("ncf,ncf", "workloads")
    with pytest.raises(ConfigError, match=r"^config gpulab.workloads: 'ncf,,gnmt' is not a comma list of .*: item 2"):
        limits.names("ncf,,gnmt", "config gpulab.workloads", ("all",), r"[a-z0-9_-]+")


@pytest.mark.parametrize("value", ["\u0663", "\u00b2", "9" * 5000])
def test_a_history_gpu_index_is_ascii_digits(value):
    with pytest.raises(ConfigError, match=r"^--gpu: "):
        query.gpu_filter(value, "r740-01")


def test_a_dcgm_level_is_ascii_digits():
    with pytest.raises(ConfigError, match=r"^--dcgm-level: '\u0663' is not a DCGM run level"):
        dcgm.level_for("quick", None, "\u0663")
    assert dcgm.level_for("quick", None, " 3 ") == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["sweep", "--gpus", "1,,2", "--dry-run"], "gpulab: --gpus: '1,,2': item 2 is empty"),
        (["sweep", "--gpus", "\u00b2", "--dry-run"], "gpulab: --gpus: '\u00b2' is not a GPU count"),
        (
            ["sweep", "--seeds", "\u0663", "--workloads", "ncf", "--mode", "throughput", "--dry-run"],
            "gpulab: --seeds: ",
        ),
        (["history", "--limit", "\u0663"], "gpulab: --limit: '\u0663' is not a whole number from 1 to 10000 rows"),
        (["history", "--gpu", "\u00b2", "--host", "localhost"], "gpulab: --gpu: '\u00b2' is neither a GPU UUID"),
    ],
)
def test_on_the_command_line_one_line_exit_2_nothing_written(tmp_path, args, message):
    (tmp_path / "home").mkdir()
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        HOME=str(tmp_path / "home"),
        INVOKE_GPULAB_INVENTORY=str(LOCAL),
        INVOKE_GPULAB_RESULTS=str(tmp_path / "results"),
        INVOKE_GPULAB_ARTIFACTS=str(tmp_path / "artifacts"),
    )
    before = checkout.state()
    p = subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert checkout.state() == before, "written into the checkout"
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith(message), p.stderr[-2000:]
    assert "Traceback" not in p.stderr + p.stdout
    assert sorted(x.name for x in tmp_path.iterdir()) == ["home"]
    assert {x.name for x in (tmp_path / "home").iterdir()} <= {".ansible"}  # Ansible's own, which any import makes
