"""The dry run's unit line reads as English: "about 46 d 3 h", but "under 1 min" without "about" (a demo's
dry run on this machine said "2 runs, about under 1 min")."""

from lab.hosts import inventory
from lab.sweep import plan as pl
from lab.sweep import study


def unit_line(minutes: list[float]) -> str:
    hosts = inventory.load("inventory/local.yml").select()
    runs = [pl.PlannedRun("localhost", "ncf", -1, s, "ttt", "tiny") for s in (1, 2)]
    lines, _ = study.describe(runs, hosts, past={("host", "localhost", "ncf", "ttt", "tiny", -1): minutes})
    return lines[0]


def test_a_short_estimate_is_not_about_under():
    assert unit_line([0.1, 0.12]) == "localhost (GPU model auto): 2 runs, under 1 min"
    assert unit_line([5.0]) == "localhost (GPU model auto): 2 runs, about 10 min"
