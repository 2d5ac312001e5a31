"""lab/data/trends.yml: the trend checks' thresholds are data, checked when loaded (lab.validate.trends)."""

from __future__ import annotations

import pytest
import yaml

from lab.core.errors import ConfigError
from lab.validate import trends


def test_the_shipped_table_loads_and_names_every_figure_of_the_burn_in():
    from lab.validate.verdict import GPU_METRICS

    table = trends.load_trends()
    assert set(table["figures"]["checks"]) == set(GPU_METRICS)
    assert trends.sources(table)["memory_bandwidth_gbs"] == ["memory_bandwidth_gbs", "memory_bandwidth_gbs trend"]
    assert trends.depth(table) == 5


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t["figures"].update(warn_drop=0.2), "figures: warn_drop 0.2 is above fail_drop 0.1"),
        (lambda t: t["figures"].update(fail_drop=2), "figures.fail_drop"),
        (lambda t: t["idle_temperature"].pop("window"), "idle_temperature"),
        (lambda t: t.update(extra=1), "extra"),
        (lambda t: t["ecc_corrected"].update(warn_growth="many"), "ecc_corrected.warn_growth"),
    ],
)
def test_a_bad_table_is_one_line(tmp_path, change, message):
    table = yaml.safe_load(trends.TRENDS.read_text())
    change(table)
    path = tmp_path / "trends.yml"
    path.write_text(yaml.safe_dump(table))
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        trends.load_trends(path)
