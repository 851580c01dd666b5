"""The benchmark chart's product bars: every family's ratio turned so that > 1 means ours is faster or
smaller than what it is set against, its goal turned the same way, gathered in the run's order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import controlplane, density, hibernation, promotion, realnodes, report, shared


def test_a_promotion_slower_than_its_floor_is_a_bar_under_one_short_of_its_goal() -> None:
    [(label, value, goal)] = promotion.ratios({"wanted": 500, "host_nodes": 5000, "ratio_ours_over_floor": 1.78})

    assert label == "promotion of 500 of 5,000 nodes"
    assert value == pytest.approx(1 / 1.78)
    assert goal == pytest.approx(1 / 1.5)
    assert value < goal


def test_the_control_plane_has_a_bar_per_distribution_and_percentile_with_the_p99_goal_only() -> None:
    result = {"rounds": 20, "concurrent": 10, "sequential": {"ratio_p50": 0.97, "ratio_p99": 1.12},
              "at_once": {"ratio_p50": 1.26, "ratio_p99": 1.08}}

    bars = controlplane.ratios(result)

    assert [(label.rsplit(" ", 1)[1], round(value, 3), goal and round(goal, 3)) for label, value, goal in bars] == [
        ("p50", round(1 / 0.97, 3), None), ("p99", round(1 / 1.12, 3), round(1 / 1.2, 3)),
        ("p50", round(1 / 1.26, 3), None), ("p99", round(1 / 1.08, 3), round(1 / 1.2, 3))]
    assert "one at a time" in bars[0][0] and "10 at once" in bars[2][0]


def test_families_whose_ratio_is_ours_over_something_are_turned_and_realnodes_is_kept() -> None:
    assert hibernation.ratios({"ratio_wake_over_create": 0.8})[0][1] == pytest.approx(1.25)
    assert shared.ratios({"pods": 500, "ratio_ours_over_floor": 1.1})[0][1:] == (pytest.approx(1 / 1.1),
                                                                                 pytest.approx(1 / 1.3))
    assert realnodes.ratios({"control_plane": {"ratio_p50": 0.81}})[0][1] == 0.81


def test_density_sets_each_tuning_against_the_goals_and_the_tunings_against_each_other() -> None:
    result = {"passes": [
        {"tuning": "lean", "gogc": 50, "steps": [
            {"tenants": 10, "pss_mib_per_tenant_mean": 190.0, "idle_cpu_pct_per_tenant_mean": 1.2},
            {"tenants": 30, "pss_mib_per_tenant_mean": 250.0, "idle_cpu_pct_per_tenant_mean": 2.0}]},
        {"tuning": "stock", "gogc": 100, "steps": [
            {"tenants": 30, "pss_mib_per_tenant_mean": 300.0, "idle_cpu_pct_per_tenant_mean": 3.0}]}]}

    bars = {label: (value, goal) for label, value, goal in density.ratios(result)}

    assert bars["density, 30 tenants lean: PSS per tenant against 200 MiB"] == (pytest.approx(0.8), 1.0)
    assert bars["density, 30 tenants lean: idle CPU per tenant against 1 %"] == (pytest.approx(0.5), 1.0)
    assert bars["density, 30 tenants stock: PSS per tenant against 200 MiB"] == (pytest.approx(200 / 300), 1.0)
    assert bars["density, 30 tenants: PSS, stock / lean tuning"] == (pytest.approx(1.2), None)
    assert bars["density, 30 tenants: idle CPU, stock / lean tuning"] == (pytest.approx(1.5), None)
    assert len(bars) == 6


def test_the_chart_takes_the_product_bars_in_the_documents_order_and_skips_what_a_log_axis_cannot_show() -> None:
    doc = {"meta": {}, "metrics": [], "promotion": {"chart": [["promotion", 0.5, 0.67], ["smoke", -0.2, None]]},
           "hibernation": {"wake_median_s": 3.0}, "shared": {"chart": [["shared", 1.1, None], ["nan", float("nan"), 1]]}}

    assert report.product_ratios(doc) == [("promotion", 0.5, 0.67), ("shared", 1.1, None)]


def test_a_family_run_alone_writes_its_chart_bars_into_its_json(tmp_path: Path) -> None:
    result = {"pods": 500, "ratio_ours_over_floor": 1.1}

    async def measure(workdir: Path, args: object) -> dict[str, object]:
        return dict(result)

    out = tmp_path / "shared.json"
    report.family_main("shared", None, ["--json", str(out), "--workdir", str(tmp_path / "work")], lambda p: None,
                       measure, str, str, "<!-- b -->", "<!-- e -->", json_flag=True, ratios=shared.ratios)

    written = json.loads(out.read_text())["shared"]
    assert [tuple(bar) for bar in written["chart"]] == shared.ratios(result)


def test_a_result_its_bars_cannot_be_drawn_from_keeps_everything_else() -> None:
    result = {"pods": 500}  # the ratio is missing

    why = report.add_chart(result, shared.ratios)

    assert why is not None and "ratio_ours_over_floor" in why
    assert result == {"pods": 500}
