"""The Grafana dashboard in docs/grafana/odradek.json against a real broker's `/metrics`: every
metric a panel's or a variable's PromQL names is exported, with the labels its matchers and
groupings use (and the label values its literal matchers and the percentile variable pick), so
a misspelt name or label shows here and not as an empty panel in an operator's Grafana. The
dashboard is also checked as Grafana imports it: unique panel ids, the `DS_PROMETHEUS` input
used by every panel, query and variable."""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from broker_process import broker_with_metrics, wait_until
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "odradek.json"
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
TOPIC, MESSAGES, GROUP = "grafana-topic", 200, "grafana-group"
# Added by Prometheus to every series it scrapes, so never in the endpoint's own output.
TARGET_LABELS = {"job", "instance"}

# ---------------------------------------------------------------------------------------------
# PromQL, as far as a dashboard needs: selectors, their matchers, function calls, groupings.

AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
FUNCTIONS = {
    *AGGREGATIONS,
    "abs", "absent", "absent_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "day_of_month", "day_of_week", "day_of_year", "days_in_month", "delta", "deriv", "exp",
    "floor", "histogram_quantile", "histogram_count", "histogram_sum", "holt_winters",
    "hour", "idelta", "increase", "irate", "label_join", "label_replace", "ln", "log2",
    "log10", "minute", "month", "predict_linear", "rate", "resets", "round", "scalar", "sgn",
    "sort", "sort_desc", "sqrt", "time", "timestamp", "vector", "year",
    *(f"{kind}_over_time" for kind in ("avg", "min", "max", "sum", "count", "quantile",
                                       "stddev", "stdvar", "last", "present")),
}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<variable>\$(?:\{[^}]*\}|\w+))
  | (?P<duration>(?:\d+(?:ms|s|m|h|d|w|y))+\b)
  | (?P<number>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+))
  | (?P<ident>[a-zA-Z_:][\w:]*)
  | (?P<matchop>=~|!~|!=|==|>=|<=|=)
  | (?P<punct>[{}(),])
  | (?P<op>[-+*/%^<>@])
""", re.VERBOSE)


@dataclass
class Selector:
    name: str
    matchers: list[tuple[str, str, str]] = field(default_factory=list)  # label, op, value


@dataclass
class Query:
    selectors: list[Selector] = field(default_factory=list)
    functions: set[str] = field(default_factory=set)
    grouping_labels: set[str] = field(default_factory=set)


def tokenize(expr: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None:
            raise ValueError(f"cannot read PromQL at {expr[position:]!r} in {expr!r}")
        position = match.end()
        if match.lastgroup != "space":
            tokens.append((match.lastgroup, match.group()))
    return tokens


def parse_promql(expr: str) -> Query:
    """The metric selectors, functions and grouping labels of a PromQL expression. Anything
    it cannot place raises, so an expression this misreads fails the test instead of passing
    unchecked."""
    tokens = tokenize(expr)
    query = Query()
    i = 0

    def peek(offset: int = 0) -> tuple[str, str]:
        return tokens[i + offset] if i + offset < len(tokens) else ("end", "")

    while i < len(tokens):
        kind, text = tokens[i]
        # `sum(...) by (l)`, `sum by (l) (...)`: an aggregation may come before its grouping.
        called = peek(1) == ("punct", "(") or (
            text in AGGREGATIONS and peek(1)[0] == "ident" and peek(1)[1] in GROUPING)
        if kind == "ident" and called:
            if text in GROUPING:
                i += 2
                while peek() != ("punct", ")"):
                    label_kind, label = peek()
                    if label_kind == "ident":
                        query.grouping_labels.add(label)
                    elif (label_kind, label) != ("punct", ","):
                        raise ValueError(f"unexpected {label!r} in {text}(...) of {expr!r}")
                    i += 1
            else:
                query.functions.add(text)
            i += 1
        elif kind == "ident" and text.lower() not in KEYWORDS and text not in GROUPING:
            selector = Selector(text)
            query.selectors.append(selector)
            if peek(1) == ("punct", "{"):
                i += 2
                while peek() != ("punct", "}"):
                    if peek() == ("punct", ","):
                        i += 1
                        continue
                    (label_kind, label), (op_kind, op), (value_kind, value) = (
                        peek(), peek(1), peek(2))
                    if (label_kind, op_kind, value_kind) != ("ident", "matchop", "string"):
                        raise ValueError(f"unreadable matcher at {label!r} in {expr!r}")
                    selector.matchers.append((label, op, value[1:-1]))
                    i += 3
            i += 1
        elif (kind, text) == ("punct", "{"):
            raise ValueError(f"a selector without a metric name in {expr!r}")
        else:
            i += 1
    return query


_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<selector>.+),\s*(?P<label>\w+)\s*\)\s*$")


# ---------------------------------------------------------------------------------------------
# The dashboard as Grafana sees it.

def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def all_panels(dashboard: dict) -> list[dict]:
    """Top-level panels and those folded into collapsed rows."""
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def custom_options(dashboard: dict) -> dict[str, list[str]]:
    return {variable["name"]: [option["value"] for option in variable["options"]]
            for variable in dashboard["templating"]["list"] if variable["type"] == "custom"}


def queries(dashboard: dict) -> list[tuple[str, Query, set[str]]]:
    """(where, parsed query, labels the query needs on its metric) of every panel target and
    every query variable."""
    found = []
    for panel in all_panels(dashboard):
        for target in panel.get("targets", []):
            found.append((f"panel {panel['id']} {panel['title']!r} {target['refId']}",
                          parse_promql(target["expr"]), set()))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        text = variable["query"]["query"]
        match = _LABEL_VALUES.match(text)
        assert match, f"variable {variable['name']}: not a label_values() query: {text}"
        found.append((f"variable {variable['name']}", parse_promql(match["selector"]),
                      {match["label"]}))
    return found


def exported_labels(families) -> dict[str, list[dict[str, str]]]:
    """{sample name: [labels of each sample]} of one scrape."""
    samples: dict[str, list[dict[str, str]]] = {}
    for family in families:
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(dict(sample.labels))
    return samples


def matcher_problem(name: str, series: list[dict[str, str]], label: str, op: str, value: str,
                    options: dict[str, list[str]]) -> str | None:
    if label in TARGET_LABELS:
        return None
    if op == "=" and value == "":
        if not any(label not in labels for labels in series):
            return f"{name} has no series without {label!r}"
        return None
    if not any(label in labels for labels in series):
        return f"{name} has no label {label!r}"
    variables = re.findall(r"\$(\w+)", value)
    if op == "=" and variables:
        # A custom variable's every option must select something (the percentiles).
        for variable in variables:
            for option in options.get(variable, []):
                wanted = value.replace(f"${variable}", option)
                if not any(labels.get(label) == wanted for labels in series):
                    return f"{name} has no {label}={wanted!r} (variable ${variable})"
    elif op == "=" and not any(labels.get(label) == value for labels in series):
        return f"{name} has no {label}={value!r}"
    elif op == "=~" and not variables and not any(
            re.fullmatch(value, labels.get(label, "")) for labels in series):
        return f"{name} has no {label} matching {value!r}"
    return None


def problems(dashboard: dict, samples: dict[str, list[dict[str, str]]]) -> list[str]:
    """What in the dashboard would show nothing against these samples."""
    found = []
    options = custom_options(dashboard)
    for where, query, needed_labels in queries(dashboard):
        if not query.selectors:
            found.append(f"{where}: no metric")
        unknown = query.functions - FUNCTIONS
        if unknown:
            found.append(f"{where}: unknown functions {sorted(unknown)}")
        for selector in query.selectors:
            series = samples.get(selector.name)
            if series is None:
                found.append(f"{where}: {selector.name} is not exported")
                continue
            for label, op, value in selector.matchers:
                problem = matcher_problem(selector.name, series, label, op, value, options)
                if problem:
                    found.append(f"{where}: {problem}")
            for label in needed_labels - TARGET_LABELS:
                if not any(label in labels for labels in series):
                    found.append(f"{where}: {selector.name} has no label {label!r}")
        for label in query.grouping_labels - TARGET_LABELS:
            if not any(label in labels for selector in query.selectors
                       for labels in samples.get(selector.name, [])):
                found.append(f"{where}: no metric of the query has the label {label!r}")
    return found


# ---------------------------------------------------------------------------------------------
# Tests without a broker.

def test_promql_reading():
    query = parse_promql(
        'sum by (topic) (rate(kafka_a_total{job=~"$job",topic=~"$topic"}[$__rate_interval])) '
        '/ ignoring(x) topk(10, b_count{request="Produce"} offset 5m) > 0.5 and on() c')
    assert [s.name for s in query.selectors] == ["kafka_a_total", "b_count", "c"]
    assert query.selectors[0].matchers == [("job", "=~", "$job"), ("topic", "=~", "$topic")]
    assert query.functions == {"sum", "rate", "topk"}
    assert query.grouping_labels == {"topic", "x"}
    assert parse_promql('max(m{l="a}b"}) without (l)').selectors[0].matchers == [("l", "=", "a}b")]
    with pytest.raises(ValueError):
        parse_promql('{__name__="m"}')


def test_dashboard_imports_into_grafana():
    dashboard = load_dashboard()
    # Grafana's import asks for a Prometheus data source for the input and substitutes it.
    [datasource_input] = dashboard["__inputs"]
    assert {key: datasource_input[key] for key in ("name", "type", "pluginId")} == {
        "name": "DS_PROMETHEUS", "type": "datasource", "pluginId": "prometheus"}
    assert dashboard["id"] is None and dashboard["uid"]  # importable next to other dashboards
    panels = all_panels(dashboard)
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    rows = [panel["title"] for panel in panels if panel["type"] == "row"]
    assert rows == ["Cluster health", "Throughput", "Request latency", "Partitions",
                    "Consumer groups", "Metadata quorum", "Resources"]
    for panel in panels:
        position = panel["gridPos"]
        assert position["x"] + position["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]
    # Every variable a query uses is defined (Grafana's own `$__...` aside).
    used = {name for _where, query, _labels in queries(dashboard) for s in query.selectors
            for _l, _op, value in s.matchers for name in re.findall(r"\$(\w+)", value)}
    assert used <= set(variables), used - set(variables)
    assert {"job", "instance", "topic", "request", "quantile"} <= used


def test_a_misspelt_name_or_label_is_found():
    dashboard = load_dashboard()
    samples = {"kafka_server_brokertopicmetrics_messagesin_total": [{"topic": "t"}, {}]}
    target = {"refId": "A", "datasource": DATASOURCE}
    dashboard["templating"]["list"] = []
    dashboard["panels"] = [
        {"id": 1, "title": "ok", "type": "timeseries", "targets": [dict(target, expr=(
            'sum by (topic) (rate(kafka_server_brokertopicmetrics_messagesin_total'
            '{topic!="", job=~"$job"}[5m]))'))]},
        {"id": 2, "title": "name", "type": "timeseries", "targets": [dict(target, expr=(
            "rate(kafka_server_brokertopicmetrics_messageins_total[5m])"))]},
        {"id": 3, "title": "label", "type": "timeseries", "targets": [dict(target, expr=(
            'kafka_server_brokertopicmetrics_messagesin_total{topik="t"}'))]},
        {"id": 4, "title": "value", "type": "timeseries", "targets": [dict(target, expr=(
            'kafka_server_brokertopicmetrics_messagesin_total{topic="u"}'))]},
        {"id": 5, "title": "grouping", "type": "timeseries", "targets": [dict(target, expr=(
            "sum by (partition) (kafka_server_brokertopicmetrics_messagesin_total)"))]},
        {"id": 6, "title": "function", "type": "timeseries", "targets": [dict(target, expr=(
            "rat(kafka_server_brokertopicmetrics_messagesin_total[5m])"))]},
    ]
    found = problems(dashboard, samples)
    assert [problem.split(" ", 2)[2].split(" ")[0] for problem in found] == [
        "'name'", "'label'", "'value'", "'grouping'", "'function'"], found


# ---------------------------------------------------------------------------------------------
# Against a real broker.

def scrape(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return list(text_string_to_metric_families(response.read().decode()))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with broker_with_metrics(tmp_path_factory.mktemp("grafana")) as broker:
        yield broker


def produce_and_consume(bootstrap: str) -> None:
    """Traffic on a topic and a group committing offsets, so every per-topic, per-API and
    per-group series exists."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    try:
        for i in range(MESSAGES):
            producer.produce(TOPIC, value=b"value-%d" % i)
        assert producer.flush(30) == 0
    finally:
        producer.close()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([TOPIC])
        consumed = 0

        def consume_all() -> bool:
            nonlocal consumed
            for message in consumer.consume(100, timeout=0.5):
                assert message.error() is None, message.error()
                consumed += 1
            return consumed >= MESSAGES

        wait_until(consume_all, 30, interval=0, message="every message consumed")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def test_every_metric_the_dashboard_uses_is_exported(broker):
    produce_and_consume(broker.bootstrap)
    samples = exported_labels(scrape(broker.metrics_url))
    dashboard = load_dashboard()
    found = problems(dashboard, samples)
    assert not found, "\n".join(found)
    referenced = {selector.name for _where, query, _labels in queries(dashboard)
                  for selector in query.selectors}
    assert len(referenced) >= 40  # the parse found the dashboard's metrics, not a few
    # The per-version request counter the API-and-version table reads.
    produce_versions = {labels["version"] for labels in
                        samples["kafka_network_requestmetrics_requests_total"]
                        if labels["request"] == "Produce"}
    assert produce_versions and all(version.isdigit() for version in produce_versions)
