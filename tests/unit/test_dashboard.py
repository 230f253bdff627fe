"""The chart's Grafana dashboard (charts/gang-scheduler/dashboards/gang-scheduler.json) and
alerts (charts/gang-scheduler/files/alerts.yaml) against the scheduler's own metrics: every
metric their PromQL names is one the registry of scheduler/shell/metrics.py defines, as the
type the name implies; every metric the registry defines has a panel; the rules pass
``promtool check rules``, and so does every panel's PromQL (as recording rules).

promtool comes from ``make binaries`` (e2e/promtool/build.sh): without it these tests fail
saying so. tests/integration/test_dashboard_metrics.py holds the same names against a running
scheduler's /metrics; tests/unit/test_helm_chart.py renders the chart's ConfigMap and
PrometheusRule."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from e2e.helm import MissingBinary, promtool_binary
from e2e.monitoring import (
    ALERTS,
    DASHBOARD,
    REPO,
    alert_queries,
    all_queries,
    dashboard_queries,
    exposed_names,
    metric_names,
    registry_families,
    variable_expr,
)

# promtool is built by make test while other tests run (e2e/awaiting_builds.py).
pytestmark = pytest.mark.tools


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return promtool_binary()
    except MissingBinary as missing:
        pytest.fail(str(missing), pytrace=False)


def _check_rules(promtool: Path, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), "check", "rules", str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


# -- the names in the PromQL ------------------------------------------------------------------


def test_metric_names_are_the_identifiers_that_are_not_functions_keywords_or_labels() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (instance, le) (rate(a_seconds_bucket{job=~"$job", '
        'x="{not_a_metric}"}[$__rate_interval]))) / on (job) group_left (queue) b:recorded '
        "offset 5m > bool 1e3 and c_total unless avg without (pod) (d) or max(e) @ start() "
        '* Inf + count_values("le", f) - topk(3, g) or absent(h[5m:1m])'
    )
    assert metric_names(expr) == {
        "a_seconds_bucket", "b:recorded", "c_total", "d", "e", "f", "g", "h",
    }  # fmt: skip
    assert metric_names("sum(rate(x_total[1h30m]))") == {"x_total"}
    assert metric_names('vector(1) and on() label_replace(y, "a", "$1", "b", "(.*)")') == {"y"}


def test_a_grafana_variables_query_is_read_for_its_series_selector() -> None:
    assert variable_expr("label_values(gang_scheduler_pending_gangs, job)") == (
        "gang_scheduler_pending_gangs"
    )
    assert variable_expr('label_values(up{job="x"}, instance)') == 'up{job="x"}'
    assert variable_expr("label_values(job)") == ""
    assert variable_expr("query_result(max(m))") == "query_result(max(m))"


# -- against the registry ---------------------------------------------------------------------


def test_every_metric_the_dashboard_and_the_alerts_name_is_one_the_scheduler_defines() -> None:
    families = registry_families()
    exposed = exposed_names(families)
    queries = all_queries()
    assert len(queries) > 40  # the dashboard's targets and variables, and the alerts
    unknown = [
        f"{query.where}: {name}"
        for query in queries
        for name in sorted(query.names)
        if name not in exposed
    ]
    hint = (
        "names the registry of scheduler/shell/metrics.py does not define (a histogram is "
        "read as _bucket, _sum or _count, a counter as _total)"
    )
    assert unknown == [], f"{hint}:\n" + "\n".join(unknown)
    assert all(query.names for query in queries), [q.where for q in queries if not q.names]


def test_every_metric_the_scheduler_defines_has_a_panel() -> None:
    families = registry_families()
    read = {exposed_names(families)[name] for q in dashboard_queries() for name in q.names}
    missing = sorted(set(families) - read)
    assert missing == [], (
        f"metrics with no panel on {DASHBOARD.relative_to(REPO)}: {missing}; "
        "add one (or say here why a metric has none)"
    )


# -- the dashboard ----------------------------------------------------------------------------


def _panels(dashboard: dict) -> list[dict]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def test_the_dashboard_is_an_importable_grafana_dashboard_over_a_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "gang-scheduler"
    assert dashboard["title"]
    assert dashboard["schemaVersion"] >= 36
    assert dashboard.get("id") is None  # an import makes its own
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = _panels(dashboard)
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in panels:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert target["expr"].count("(") == target["expr"].count(")"), panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"]["uid"] == "${datasource}", variable["name"]
    # No two panels overlap on the grid.
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        box = panel["gridPos"]
        for x in range(box["x"], box["x"] + box["w"]):
            for y in range(box["y"], box["y"] + box["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


def test_the_dashboard_shows_what_issue_26_asks_for() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = {
        panel["title"]: " ".join(t["expr"] for t in panel["targets"])
        for panel in _panels(dashboard)
        if panel["type"] != "row"
    }

    def panel_reading(pattern: str) -> list[str]:
        return [title for title, expr in exprs.items() if re.search(pattern, expr)]

    wanted = {
        "gangs waiting by queue": r"by \(queue\) \(gang_scheduler_queue_gangs\{[^}]*pending",
        "gang attempts by result": r"by \(result\).*gang_attempts_total",
        "gang wait time quantiles": r"histogram_quantile\(0\.99,.*complete_to_bound_seconds_bucket",
        "binds per second": r"rate\(gang_scheduler_bind_duration_seconds_count",
        "pass duration quantiles": r"histogram_quantile\(0\.99,.*pass_duration_seconds_bucket",
        "event-loop lag": r"histogram_quantile\(0\.99,.*event_loop_lag_seconds_bucket",
        "preemption victims": r"preemption_victims_total",
        "reclaim victims": r"reclaim_victims_total",
        "stale-gang victims": r"stale_gang_victims_total",
        "queue fair share": r"queue_fair_share",
        "leader": r"gang_scheduler_leader",
        "API server unreachable": r"api_unreachable_seconds",
    }
    missing = [what for what, pattern in wanted.items() if not panel_reading(pattern)]
    assert missing == []


# -- promtool ---------------------------------------------------------------------------------


def test_the_alert_rules_pass_promtool_check_rules(promtool: Path) -> None:
    result = _check_rules(promtool, ALERTS)
    assert result.returncode == 0, result.stdout + result.stderr
    rules = len(alert_queries())
    assert f"SUCCESS: {rules} rules found" in result.stdout, result.stdout


def test_the_alerts_cover_the_scheduler_its_leader_api_server_waits_passes_and_loop() -> None:
    alerts = [q.where for q in alert_queries()]
    assert {f"rule {name!r}" for name in ("GangSchedulerDown", "GangSchedulerNoLeader",
            "GangSchedulerAPIServerUnreachable", "GangSchedulerGangsWaitLong",
            "GangSchedulerPassesSlow", "GangSchedulerEventLoopLag")} <= set(alerts)  # fmt: skip
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
            assert rule["annotations"]["summary"], rule["alert"]
            assert rule["annotations"]["description"], rule["alert"]


def test_every_panels_promql_parses_as_promtool_reads_it(promtool: Path, tmp_path: Path) -> None:
    # Grafana's variables as a query would get them, then each target as a recording rule.
    values = {"$__rate_interval": "5m", "$__interval": "1m", "$job": ".*", "$resource": "cpu"}
    rules = []
    for i, query in enumerate(dashboard_queries()):
        expr = query.expr
        for variable, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
            expr = expr.replace(variable, value)
        assert "$" not in expr, f"{query.where}: a variable with no stand-in here: {expr}"
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = _check_rules(promtool, path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_not_built_is_a_failure_that_says_to_run_make_binaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An empty cache: build.sh --path finds nothing and builds nothing.
    monkeypatch.setenv("GANG_SCHEDULER_CACHE", str(tmp_path))
    with pytest.raises(MissingBinary, match="run `make binaries`"):
        promtool_binary()
