"""The chart's Grafana dashboard and Prometheus alerts (charts/gang-scheduler/dashboards/ and
files/alerts.yaml): the PromQL they hold, the metric names that PromQL reads, and the series
names the scheduler's registry (scheduler/shell/metrics.py) exposes. What the tests that hold
the dashboard and the alerts to the scheduler's metrics share: tests/unit/test_dashboard.py
(against the registry) and tests/integration/test_dashboard_metrics.py (against /metrics)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "gang-scheduler"
DASHBOARD = CHART / "dashboards" / "gang-scheduler.json"
ALERTS = CHART / "files" / "alerts.yaml"

# PromQL's own words: aggregations, functions (followed by "(" anyway, but ``sum by (x)``
# puts a word between), keywords and the float literals Inf and NaN.
_AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}  # fmt: skip
_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "and", "or", "unless", "atan2", "inf", "nan",
}  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")  # label matchers, once strings are gone
_RANGE = re.compile(r"\[[^\[\]]*\]")  # [5m], [$__rate_interval], [1h:5m]
_LABEL_LIST = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
# Numbers (1, 0.99, 1e3, 0x1f) and durations (5m, 1h30m) after offset or @: words that are
# not names. A name starts with a letter, _ or :; a number is never glued to one.
_NUMBER = re.compile(r"(?<![\w:])(?:0x[0-9a-f]+|\d+(?:\.\d*)?(?:e[+-]?\d+)?|\.\d+)\w*", re.I)
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana ``label_values(...)`` query) reads:
    every identifier that is neither in a string, a label matcher, a range, a ``by``/``on``
    list, nor a function, aggregation or keyword. ``{__name__="x"}`` is not understood: the
    dashboard and the alerts do not use it (and ``unnamed`` would say so, see below)."""
    text = _STRING.sub('""', expr)
    text = _GRAFANA_VARIABLE.sub(" ", text)
    while True:  # matchers hold no braces once strings are gone; one pass would do
        stripped = _MATCHERS.sub(" ", text)
        if stripped == text:
            break
        text = stripped
    text = _RANGE.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        word = match.group()
        rest = text[match.end() :].lstrip()
        if rest.startswith("("):
            continue  # a function (or an aggregation written sum(...))
        if word.lower() in _KEYWORDS or word.lower() in _AGGREGATIONS:
            continue
        names.add(word)
    return names


def variable_expr(query: str) -> str:
    """The PromQL in a Grafana variable's query: the series selector of
    ``label_values(selector, label)`` (nothing of ``label_values(label)``, which names no
    metric), the query itself otherwise (``query_result(expr)`` as a function call)."""
    match = re.fullmatch(r"\s*label_values\((.*?)(?:,\s*\w+)?\s*\)\s*", query, re.S)
    if not match:
        return query
    inner = match.group(1)
    return "" if re.fullmatch(r"\s*\w+\s*", inner) and "," not in query else inner


@dataclass(frozen=True)
class Query:
    """One PromQL expression and where it is (a panel's title, an alert's name)."""

    where: str
    expr: str

    @property
    def names(self) -> set[str]:
        return metric_names(self.expr)


def _panels(panels: list[dict]) -> Iterator[dict]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # rows may hold theirs (collapsed)


def dashboard_queries(path: Path = DASHBOARD) -> list[Query]:
    """Every panel target's expression, and every query variable's metric."""
    dashboard = json.loads(path.read_text())
    queries = [
        Query(f"panel {panel.get('title')!r} ({target.get('refId')})", target["expr"])
        for panel in _panels(dashboard["panels"])
        for target in panel.get("targets", [])
        if target.get("expr")
    ]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, dict) else str(query or "")
        expr = variable_expr(text)
        if expr:
            queries.append(Query(f"variable ${variable['name']}", expr))
    return queries


def alert_queries(path: Path = ALERTS) -> list[Query]:
    """Every rule's expression (alerts and recording rules)."""
    rules = yaml.safe_load(path.read_text())
    return [
        Query(f"rule {rule.get('alert') or rule.get('record')!r}", rule["expr"])
        for group in rules["groups"]
        for rule in group["rules"]
    ]


def all_queries() -> list[Query]:
    return dashboard_queries() + alert_queries()


def exposed_names(families: dict[str, str]) -> dict[str, str]:
    """The series names a registry exposes, each to its family's name, from {family name:
    type} as prometheus_client reports them (a counter's family name has no _total):
    a gauge its name; a counter name_total; a histogram name_bucket, name_sum, name_count
    (the _created series prometheus_client adds are not something to graph)."""
    names: dict[str, str] = {}
    for family, kind in families.items():
        if kind == "counter":
            names[f"{family}_total"] = family
        elif kind == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                names[family + suffix] = family
        elif kind == "summary":
            for suffix in ("", "_sum", "_count"):
                names[family + suffix] = family
        else:
            names[family] = family
    return names


def registry_families() -> dict[str, str]:
    """{family name: type} of the scheduler's registry, made as the scheduler makes it."""
    from scheduler.shell.metrics import Metrics  # noqa: PLC0415 (the scheduler, loaded late)

    return {family.name: family.type for family in Metrics.create().registry.collect()}
