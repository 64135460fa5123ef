"""What the stack's alarms and dashboard read, as CloudWatch would: each metric they name (its
namespace, name and dimensions), each SEARCH of the dashboard (its schema, metric and the
dimension values it picks), and each Logs Insights query (the log group, the fields it
reads, the messages it matches). The tests hold these against what the functions write."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .cloudformation import STACK_ID, TEMPLATE, Stack

# The dimensions a metric is filed under, as (name, value) pairs: its identity, with its name.
Dimensions = frozenset[tuple[str, str]]


@dataclass(frozen=True)
class Metric:
    namespace: str
    name: str
    dimensions: Dimensions


@dataclass(frozen=True)
class Search:
    namespace: str
    name: str
    dimensions: frozenset[str]  # the schema's: a metric filed under exactly these
    picked: dict[str, str]  # Dimension="value" terms

    def __hash__(self) -> int:
        return hash((self.namespace, self.name, self.dimensions))


@dataclass(frozen=True)
class Query:
    group: str
    fields: frozenset[str]  # what it reads: `fields`, `by`, and what `filter` compares
    patterns: tuple[tuple[str, str], ...]  # (field, regular expression) of its `like /.../`


def stack(name: str = "codeexec", parameters: dict[str, str] | None = None) -> Stack:
    """template.yaml as written, evaluated for a stack of that name."""
    return Stack(TEMPLATE, parameters or {}, STACK_ID.replace("stack/codeexec/", f"stack/{name}/"))


def namespace(made: Stack) -> str:
    """The functions' metrics namespace in that stack (POWERTOOLS_METRICS_NAMESPACE)."""
    variables = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
    return str(made.value(variables["POWERTOOLS_METRICS_NAMESPACE"]))


def read(made: Stack) -> list[Metric]:
    """Every metric the alarms and the dashboard's graphs name (SEARCHes aside)."""
    return alarm_metrics(made) + dashboard_metrics(dashboard(made))


def alarm_metrics(made: Stack) -> list[Metric]:
    """Every metric an alarm reads, directly or in its metric math."""
    found = []
    for alarm in made.resources("AWS::CloudWatch::Alarm").values():
        stats = [query["MetricStat"]["Metric"] for query in alarm.get("Metrics", []) if "MetricStat" in query]
        for metric in stats or [alarm]:
            dimensions = frozenset((d["Name"], d["Value"]) for d in metric.get("Dimensions", []))
            found.append(Metric(metric["Namespace"], metric["MetricName"], dimensions))
    return found


def dashboard(made: Stack) -> dict[str, Any]:
    [dashboard] = made.resources("AWS::CloudWatch::Dashboard").values()
    return json.loads(dashboard["DashboardBody"])  # type: ignore[no-any-return]


def widgets(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [widget["properties"] for widget in body["widgets"] if widget["type"] == kind]


def dashboard_metrics(body: dict[str, Any]) -> list[Metric]:
    """Every metric the dashboard's graphs name: [namespace, name, dimension, value, ..., {options}]."""
    found = []
    for graph in widgets(body, "metric"):
        for line in graph["metrics"]:
            named = [item for item in line if isinstance(item, str)]
            if named:
                namespace, name, *pairs = named
                found.append(Metric(namespace, name, frozenset(zip(pairs[::2], pairs[1::2], strict=True))))
    return found


_SEARCH = re.compile(r"SEARCH\('\s*\{(?P<schema>[^}]*)\}(?P<terms>.*?)'\s*,")
_TERM = re.compile(r'\b(\w+)="([^"]*)"')


def searches(body: dict[str, Any]) -> list[Search]:
    """The dashboard's SEARCH expressions that have a schema ({namespace, dimension, ...})."""
    found = []
    for graph in widgets(body, "metric"):
        expressions = [item["expression"] for line in graph["metrics"] for item in line if "expression" in item]
        for expression in expressions:
            for search in _SEARCH.finditer(expression):
                namespace, *dimensions = [part.strip().strip('"') for part in search["schema"].split(",")]
                terms = dict(_TERM.findall(search["terms"]))  # NOT Outcome="ok" too: "ok" must be written
                name = terms.pop("MetricName")
                found.append(Search(namespace, name, frozenset(dimensions), terms))
    return found


_COMPARED = re.compile(r"\b([A-Za-z_]\w*)\s*(?:=|!=|>=|<=|>|<|\blike\b|\bin\b)")


def queries(body: dict[str, Any]) -> list[Query]:
    found = []
    for widget in widgets(body, "log"):
        # Commands are " | "-separated; a regular expression's alternatives are not spaced.
        source, *commands = [part.strip() for part in widget["query"].split(" | ")]
        [group] = re.fullmatch(r"SOURCE '([^']+)'", source).groups()  # type: ignore[union-attr]
        fields: set[str] = set()
        patterns: list[tuple[str, str]] = []
        for command in commands:
            verb, _, rest = command.partition(" ")
            if verb == "fields":
                fields |= {name.strip() for name in rest.split(",")}
            elif verb == "stats":
                fields |= {name.strip() for name in rest.partition(" by ")[2].split(",") if name.strip()}
            elif verb == "filter":
                text = re.sub(r'"[^"]*"', '""', re.sub(r"/[^/]*/", "//", rest))  # no words of values
                fields |= set(_COMPARED.findall(text)) - {"and", "or", "not"}
                patterns += re.findall(r"(\w+) like /([^/]*)/", rest)
        found.append(Query(group, frozenset(name for name in fields if not name.startswith("@")), tuple(patterns)))
    return found
