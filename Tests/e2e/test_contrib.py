"""contrib/: the alert rules pass `promtool check rules` and their unit tests (`promtool test
rules`), and every metric the Grafana dashboard and the rules query is one that a live daemon's
/metrics exports (`up`, which Prometheus adds, excepted)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from proxy_harness import API, REPO, TIMEOUT, free_port, module_proxies, pinned_entry  # noqa: F401 (fixture)
from service_support import http_get

DASHBOARD = REPO / "contrib/grafana/pinproxy.json"
RULES = REPO / "contrib/prometheus/pinproxy-alerts.yml"
RULE_TESTS = REPO / "contrib/prometheus/pinproxy-alerts.test.yml"

# PromQL words that are not metric names: aggregations, functions and keywords.
NOT_METRICS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not installed (scripts/setup --tests installs Debian's prometheus package)", pytrace=False)
    return found


def test_promtool_check_rules():
    run = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=TIMEOUT * 6)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS: 9 rules found" in run.stdout, run.stdout


def test_promtool_test_rules():
    run = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True,
                         timeout=TIMEOUT * 6, cwd=RULE_TESTS.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout, run.stdout


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not followed by `(`
    (functions), not keywords, and not inside label matchers, ranges, label lists or strings."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\$\w+", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if expr[m.end():].lstrip().startswith("(") or m.group(0) in NOT_METRICS:
            continue
        names.add(m.group(0))
    return names


def test_metric_names_reads_promql():
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(a_bucket{job=~"$job", x="b{c}"}[$__rate_interval])))') == {"a_bucket"}
    assert metric_names("sort((x_seconds - time()) / 86400) or on(instance) y > 0.8") == {"x_seconds", "y"}


def dashboard_queries() -> list[str]:
    """Every PromQL expression of the dashboard: panel targets, and the metric of each
    `label_values(METRIC, label)` template variable."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"panel {panel['title']!r} queries nothing"
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        queries += [t["expr"] for t in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["query"]["query"])
            assert m, variable
            queries.append(m.group(1))
    return queries


def rule_queries() -> list[str]:
    return re.findall(r"^\s+expr: (.+)$", RULES.read_text(), re.M)


@pytest.fixture(scope="module")
def exported(module_proxies, pki) -> set[str]:
    """The sample names a freshly started daemon's /metrics can carry: every family it declares
    (each has `# TYPE` from the first scrape), with a histogram's `_bucket`, `_sum` and `_count`."""
    port = free_port()
    p = module_proxies(proxy={"metrics_listen": f"127.0.0.1:{port}", "allow_ports": [443]}, hosts={API: pinned_entry(pki, "api", "int-a")})
    p.wait_for_log(lambda l: l.get("event") == "metrics-listening", what="event=metrics-listening")
    status, _headers, body = http_get(port, "/metrics")
    assert status == 200, body
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", body.decode(), re.M):
        names.add(name)
        if kind == "histogram":
            names |= {name + "_bucket", name + "_sum", name + "_count"}
    return names


def test_dashboard_parses_and_queries_only_exported_metrics(exported):
    queries = dashboard_queries()
    used = set().union(*map(metric_names, queries))
    assert used - {"up"} <= exported, f"the dashboard queries metrics /metrics does not export: {sorted(used - {'up'} - exported)}"
    # The topics the dashboard is for each have a panel.
    for name in ("pinproxy_connections_total", "pinproxy_refusals_total", "pinproxy_open_tunnels",
                 "pinproxy_upstream_handshake_seconds_bucket", "pinproxy_verification_seconds_bucket",
                 "pinproxy_relayed_bytes_total", "pinproxy_config_reloads_total", "pinproxy_pin_expiry_timestamp_seconds",
                 "pinproxy_upstream_certificate_expiry_timestamp_seconds", "process_cpu_seconds_total",
                 "process_resident_memory_bytes", "process_open_fds"):
        assert name in used, f"no dashboard panel queries {name}"


def test_alert_rules_query_only_exported_metrics(exported):
    used = set().union(*map(metric_names, rule_queries()))
    assert used, "no expr found in the rules"
    assert used - {"up"} <= exported, sorted(used - {"up"} - exported)
