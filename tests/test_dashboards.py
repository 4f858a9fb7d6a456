"""Every panel of every dashboard returns data: the queries run against a real Prometheus and
a real InfluxDB fed by rigmon on a replayed recording (8 GPUs with fans, CPU sensors, field
values and an XID), plus a short burn-in for the burn-in panel. No dead panel."""

import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import scenarios as sc
from servers import InfluxDB, Prometheus, Rigmon, http_get, shipped_rules, wait_for

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "dashboards"))

import build  # noqa: E402


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dashboards")
    influx = InfluxDB(tmp)
    config = f"""
[daemon]
interval = 0.5
state_dir = "{tmp / "state"}"
[burnin]
reports_dir = "{tmp / "burnin-reports"}"
[influxdb]
enabled = true
api = "v1"
url = "{influx.url}"
flush_interval = 0.2
[alerts.power_budget]
watts = 6000
[[notifiers]]
type = "webhook"
url = "http://127.0.0.1:9/hook"
"""
    rigmon = Rigmon(tmp, sc.write(sc.rich(sc.h200()), tmp / "rich.rec.jsonl"), config)
    # a second box whose GPU 0 runs 9 °C hotter than its baseline: 3 h replayed 1000 times as fast
    # (a baseline learned in an hour of steady load, the drift over 10 minutes of it)
    (tmp / "cooling").mkdir()
    cooling = Rigmon(
        tmp / "cooling",
        sc.write(cooling_box(), tmp / "cooling" / "drift.rec.jsonl"),
        f'[daemon]\ninterval = 60\nhostname = "{COOLING_HOST}"\n[cooling]\nlearn = "1h"\nwindow = "10m"\n'
        f'[influxdb]\nenabled = true\napi = "v1"\nurl = "{influx.url}"\nflush_interval = 0.2\n',
        extra_args=["--speed", "1000"],
    )
    rigmon.neighbour = cooling
    prom = None
    try:
        rigmon.wait_ready()
        cooling.wait_ready()
        targets = [f"127.0.0.1:{rigmon.port}", f"127.0.0.1:{cooling.port}"]
        prom = Prometheus(tmp, targets, labels={"site": "lab"}, rule_files=[shipped_rules(tmp)])  # as deploy has them
        if "torch" in sys.modules or subprocess.run([sys.executable, "-c", "import torch"]).returncode == 0:
            burnin_config = tmp / "burnin.toml"
            burnin_config.write_text(
                f'[daemon]\nstate_dir = "{tmp / "burnin-state"}"\n[influxdb]\nenabled = true\n'
                f'api = "v1"\nurl = "{influx.url}"\nflush_interval = 0.2\n'
            )
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "rigmon",
                    "burnin",
                    "--minutes",
                    "0.25",
                    "--config",
                    str(burnin_config),
                    "--report",
                    str(tmp / "burnin-reports" / "run1"),
                ],
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode in (0, 1), done.stdout + done.stderr  # it ran: a verdict either way
        wait_for(
            lambda: (
                prom.query("rigmon_alert_active")
                and prom.query("rigmon_gpu_xid_errors_total")
                and prom.query("rigmon_burnin_last_passed")
                and prom.query("increase(rigmon_gpu_energy_joules_total[1d])")
                and prom.query("instance:rigmon_gpu_energy_joules:increase1m")
                and prom.query("rigmon_gpu_cooling_drift_shared_celsius")
                and influx.query('SELECT last("cooling_drift_celsius") FROM "gpu"')
            ),
            60,
            what="alerts, XIDs and a cooling drift",
        )
        yield prom, influx, rigmon
    finally:
        if prom is not None:
            prom.stop()
        rigmon.stop()
        cooling.stop()
        influx.stop()


COOLING_HOST = "cooling-box"


def cooling_box():
    """Two GPUs: 15 minutes idle, then at 300 W; after 90 minutes GPU 0 runs 9 °C hotter."""

    def modify(t, tick):
        for k, g in enumerate(tick["gpus"]):
            watts = 300.0 if t >= 900 else 40.0
            g["nvmlDeviceGetPowerUsage"] = int(watts * 1000)
            g["nvmlDeviceGetUtilizationRates"] = {"gpu": 100 if t >= 900 else 0, "memory": 30}
            g["nvmlDeviceGetTemperature:0"] = int(round(22 + 0.1 * watts + (9 if k == 0 and t >= 5400 else 0)))

    return sc.timeline(3 * 3600, 60, gpus=2, modify=modify)


def _instances(rigmon) -> str:
    """Both boxes of ``fed``, as a dashboard's $instance with both chosen."""
    return f"127.0.0.1:{rigmon.port}|127.0.0.1:{rigmon.neighbour.port}"


def _hosts() -> str:
    return f"(?:{re.escape(socket.gethostname())}|{COOLING_HOST})"


def test_committed_dashboards_are_the_generated_ones():
    for name, (kind, box) in build.FILES.items():
        assert json.loads((ROOT / "dashboards" / name).read_text()) == build.dashboard(kind, box), (
            f"{name} is stale: run python dashboards/build.py"
        )


def _panels(kind):
    for name, (k, _box) in build.FILES.items():
        if k == kind:
            for panel in json.loads((ROOT / "dashboards" / name).read_text())["panels"]:
                for target in panel.get("targets", []):  # a row has none
                    yield f"{name}: {panel['title']} [{target['refId']}]", target


def _recorded_where_some(expr: str) -> list[str]:
    """What the recording rules that ``expr`` reads and that record only where there is some
    (``… > 0``: what a box could not deliver) record from, without the ``> 0``: a healthy box
    gives their panels no data, but these must answer."""
    import yaml

    doc = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rigmon-rules.yml").read_text())
    rules = {r["record"]: r["expr"].strip() for g in doc["groups"] for r in g["rules"] if "record" in r}
    return [
        rules[name].removesuffix("> 0").strip()
        for name in re.findall(r"\binstance:rigmon_\w+:\w+", expr)
        if rules.get(name, "").endswith("> 0")
    ]


def test_every_prometheus_panel_returns_data(fed):
    prom, _, rigmon = fed
    values = {"$instance": _instances(rigmon), "$gpu": ".*", "$job": "rigmon", "$site": "lab"}
    checked = 0
    for where, target in _panels("prometheus"):
        expr = target["expr"]
        for name, value in values.items():
            expr = expr.replace(name, value)
        if not prom.query(expr):  # none recorded on a healthy box: what it is recorded from answers
            sources = _recorded_where_some(expr)
            assert sources and all(prom.query(q) for q in sources), f"dead panel: {where}: {expr}"
        checked += 1
    assert checked >= 25


def _panel_answers(prom, instance: str) -> list[tuple[str, bool]]:
    values = {"$instance": instance, "$gpu": ".*", "$job": "rigmon", "$site": "lab"}
    answers = []
    for where, target in _panels("prometheus"):
        expr = target["expr"]
        for name, value in values.items():
            expr = expr.replace(name, value)
        answers.append((where, bool(prom.query(expr))))
    return answers


def test_the_dashboards_read_the_same_through_federation_and_remote_write(fed, tmp_path):
    """deploy/prometheus/federate.yml and remote-write.yml as shipped, but for their targets: a
    fleet Prometheus federating the site one, and a store a site Prometheus remote-writes to,
    answer each panel's query with data where the site Prometheus does."""
    import yaml

    prom, _, rigmon = fed
    federate = yaml.safe_load((ROOT / "deploy" / "prometheus" / "federate.yml").read_text())["scrape_configs"]
    federate[0].update(
        static_configs=[{"targets": [f"127.0.0.1:{prom.port}"]}], scrape_interval="1s", scrape_timeout="1s"
    )
    remote = yaml.safe_load((ROOT / "deploy" / "prometheus" / "remote-write.yml").read_text())
    (tmp_path / "fleet").mkdir()
    (tmp_path / "store").mkdir()
    (tmp_path / "site").mkdir()
    fleet = Prometheus(tmp_path / "fleet", [], scrape_configs=federate)
    store = Prometheus(tmp_path / "store", [], scrape_configs=[], args=("--web.enable-remote-write-receiver",))
    remote["remote_write"][0]["url"] = f"http://127.0.0.1:{store.port}/api/v1/write"
    boxes = [f"127.0.0.1:{rigmon.port}", f"127.0.0.1:{rigmon.neighbour.port}"]
    site = Prometheus(
        tmp_path / "site", boxes, labels={"site": "lab"}, extra=remote, rule_files=[shipped_rules(tmp_path / "site")]
    )
    try:
        instance = f"127.0.0.1:{rigmon.port}"
        for p in (fleet, store):  # two samples of everything: rates and increases have data
            p.wait_query(f'count_over_time(rigmon_gpu_power_watts{{instance="{instance}"}}[5m]) >= 3', 60)
        for p in (fleet, store):  # and the second box's drift, which needs its baseline learned first
            p.wait_query("rigmon_gpu_cooling_drift_shared_celsius", 60)
            p.wait_query("instance:rigmon_gpu_energy_joules:increase1m", 60)
        want = _panel_answers(prom, _instances(rigmon))
        for name, p in (("federated", fleet), ("remote-written", store)):
            got = _panel_answers(p, _instances(rigmon))
            print(
                f"{name}: {sum(a for _, a in got)} of {len(got)} queries with data, "
                f"the site Prometheus {sum(a for _, a in want)}"
            )
            assert [w for (w, a), (_, b) in zip(got, want, strict=True) if a != b] == [], name
    finally:
        for p in (site, store, fleet):
            p.stop()


def test_on_a_normal_box_every_panel_shows_data_or_says_why_not(tmp_path):
    """The demo box (one H200; no host sensors, fans, budget, burn-in, InfluxDB or notifier):
    a panel whose query finds nothing states the reason (Grafana's "No value"), never a bare
    "No data"; the XID table shows its 0 for the GPU."""
    rigmon = Rigmon(tmp_path, sc.write(sc.h200(), tmp_path / "demo.rec.jsonl"), "[daemon]\ninterval = 0.5\n")
    prom = None
    try:
        rigmon.wait_ready()
        prom = Prometheus(
            tmp_path, [f"127.0.0.1:{rigmon.port}"], labels={"site": "lab"}, rule_files=[shipped_rules(tmp_path)]
        )
        prom.wait_query("count_over_time(rigmon_gpu_power_watts[5m]) >= 3", 60)
        prom.wait_query("instance:rigmon_gpu_energy_joules:increase1m", 60)
        values = {"$instance": f"127.0.0.1:{rigmon.port}", "$gpu": ".*", "$job": "rigmon", "$site": "lab"}
        silent, said = [], 0
        for name, (kind, _box) in build.FILES.items():
            if kind != "prometheus":
                continue
            for panel in json.loads((ROOT / "dashboards" / name).read_text())["panels"]:
                exprs = [t["expr"] for t in panel.get("targets", [])]
                for name_, value in values.items():
                    exprs = [e.replace(name_, value) for e in exprs]
                if exprs and not any(prom.query(e) for e in exprs):
                    if "noValue" in panel["fieldConfig"]["defaults"]:
                        said += 1
                    else:
                        silent.append(f"{name}: {panel['title']}")
                if panel.get("title") == "XID errors":
                    assert prom.query(exprs[0]), "the XID table's 0 for a GPU without XIDs"
                if panel.get("title") == "Last burn-in verdict":  # a value, mapped to "never run"
                    (got,) = prom.query(exprs[0])
                    mapped = panel["fieldConfig"]["defaults"]["mappings"][0]["options"][got["value"][1]]["text"]
                    assert mapped == "never run", got
        print(f"{said} empty panels say why")
        assert silent == [], f"empty without a word: {silent}"
    finally:
        if prom is not None:
            prom.stop()
        rigmon.stop()


def test_every_influxdb_panel_returns_data(fed):
    _, influx, _ = fed
    host = _hosts()
    checked = 0
    for where, target in _panels("influxdb"):
        q = (
            target["query"]
            # both bounds, as Grafana's: the sped-up replay of the second box writes its hours ahead of now
            .replace("$timeFilter", "time > now() - 1h AND time < now() + 1d")
            .replace("$__interval", "10s")
            .replace("$host", host)
            .replace("$gpu", ".*")
        )
        series = influx.query(q)
        assert series and any(any(v is not None for v in row[1:]) for s in series for row in s["values"]), (
            f"dead panel: {where}: {q}"
        )
        checked += 1
    assert checked >= 20


def test_template_variables_resolve(fed):
    prom, influx, rigmon = fed
    for name, (kind, box) in build.FILES.items():
        for var in build.dashboard(kind, box)["templating"]["list"]:
            if var["type"] != "query":
                continue
            q = var["query"]
            if kind == "prometheus":
                metric, label = re.match(r"label_values\((\w+)(?:\{[^}]*\})?, (\w+)\)", q).groups()
                url = f"http://127.0.0.1:{prom.port}/api/v1/label/{label}/values?" + urllib.parse.urlencode(
                    {"match[]": metric}
                )
                assert json.loads(http_get(url)[1])["data"], f"{name}: ${var['name']}"
            else:
                assert influx.query(q.replace("$host", re.escape(socket.gethostname()))), f"{name}: ${var['name']}"


def test_slowest_fan_counts_only_fans_that_have_turned(fed):
    """The recording's nct6798 has fans at 1150, 0 (an empty header) and 870 rpm: the slowest
    fan that turns is 870, not 0."""
    prom, influx, _ = fed
    (promql,) = [p.prom[0][0] for p in build.FLEET if p.title == "Slowest fan per box"]
    promql = promql.replace("$job", "rigmon").replace("$site", "lab")
    assert [float(r["value"][1]) for r in prom.query(promql)] == [870.0]
    (influxql,) = [p.influx[0][0] for p in build.FLEET if p.title == "Slowest fan per box"]
    series = influx.query(
        influxql.replace("$timeFilter", "time > now() - 1h")
        .replace("$__interval", "1h")
        .replace("$host", re.escape(socket.gethostname()))
    )
    assert {v for s in series for _, v in s["values"] if v is not None} == {870.0}


def _all_panels():
    for name, (kind, box) in build.FILES.items():
        for panel in json.loads((ROOT / "dashboards" / name).read_text())["panels"]:
            yield name, kind, box, panel


def test_every_fleet_query_follows_job_and_site_and_every_panel_says_what_it_shows():
    for name, kind, box, panel in _all_panels():
        assert len(panel.get("description", "")) >= 20, f"{name}: {panel['title']} has no description"
        for target in panel.get("targets", []):
            query = target.get("expr") or target.get("query")
            if kind == "prometheus" and not box:
                names = re.findall(r"\b(up|rigmon_\w+)\b", query)
                assert names and query.count('job=~"$job", site=~"$site"') == len(names), (
                    f"{name}: {panel['title']}: every series filtered by $job and $site: {query}"
                )
            elif kind == "prometheus":
                assert "$instance" in query, f"{name}: {panel['title']}: {query}"
            else:
                assert "$host" in query, f"{name}: {panel['title']}: {query}"


def test_the_fleet_filters_filter(fed):
    prom, _, _ = fed
    for where, target in _panels("prometheus"):
        if "fleet" in where and not _recorded_where_some(target["expr"]):  # those hold nothing to filter here
            expr = target["expr"].replace("$job", "rigmon")
            assert prom.query(expr.replace("$site", "lab")), where
            assert not prom.query(expr.replace("$site", "elsewhere")), f"not filtered by site: {where}"
            assert not prom.query(expr.replace("$site", "lab").replace('job=~"rigmon"', 'job=~"other"')), where


UNITS = (
    ("celsius", "celsius"),
    ("watts", "watt"),
    ("rpm", "rpm"),
    ("hertz", "hertz"),
    ("bytes", "bytes"),
    ("ratio", "percentunit"),
    ("seconds", "s"),
)


def _unit_of(query: str) -> str:
    """What a query's values are measured in, from the names of what it reads."""
    if "3.6e6" in query or "3600000" in query:
        return "kwatth"
    if "increase(" in query or "spread(" in query or "count(" in query:
        return "none"
    first = re.findall(r"\brigmon_\w+", query)[:1] or re.findall(r'\w+\("(\w+)"\)', query)
    found = {next((unit for word, unit in UNITS if n == word or n.endswith("_" + word)), "none") for n in first}
    assert len(found) <= 1, f"one query, one unit: {query}"
    return found.pop() if found else "none"


def test_no_panel_mixes_units_on_one_axis():
    """Each query is drawn in the unit of what it reads; a second unit gets its own axis (right,
    labelled); gen, width and replays are never drawn together."""
    checked = 0
    for name, _kind, _box, panel in _all_panels():
        if panel["type"] == "row":
            continue
        default = panel["fieldConfig"]["defaults"]["unit"]
        overrides = {
            o["matcher"]["options"]: {p["id"]: p["value"] for p in o["properties"]}
            for o in panel["fieldConfig"]["overrides"]
            if o["matcher"]["id"] == "byFrameRefID"
        }
        units = set()
        for target in panel["targets"]:
            query = target.get("expr") or target.get("query")
            drawn = overrides.get(target["refId"], {}).get("unit", default)
            assert drawn == _unit_of(query), f"{name}: {panel['title']} [{target['refId']}] in {drawn}: {query}"
            units.add(drawn)
            if panel["type"] == "timeseries" and drawn != default:
                assert overrides[target["refId"]].get("custom.axisPlacement") == "right", (name, panel["title"])
            checked += 1
        assert len(units) <= 2, (name, panel["title"], units)
        text = json.dumps(panel["targets"])
        assert (
            sum(
                q in text
                for q in ("pcie_link_generation", "pcie_generation", "pcie_link_width", "pcie_width", "pcie_replays")
            )
            <= 1
        ), f"{name}: {panel['title']} mixes PCIe quantities"
    assert checked >= 60


def test_an_alert_that_began_before_the_range_shown_is_still_firing_on_the_influxdb_tables(fed):
    """An alert is one point per transition. One that fired three days ago and never resolved has
    no point in the last hour, and the tables show it firing all the same."""
    _, influx, _ = fed
    host = _hosts()
    when = int((time.time() - 3 * 86400) * 1e9)
    line = (
        f"alert,host={socket.gethostname()},alertname=OldFire,severity=critical,subject=fan2 "
        f'status="firing",firing=true,summary="fired three days ago" {when}'
    )
    request = urllib.request.Request(f"{influx.url}/write?db={influx.database}", data=line.encode())
    urllib.request.urlopen(request, timeout=10).read()
    tables = [t for where, t in _panels("influxdb") if 'FROM "alert"' in t["query"]]
    assert len(tables) == 2  # the fleet's and the box's
    for target in tables:
        q = target["query"].replace("$timeFilter", "time > now() - 1h").replace("$host", host)
        rows = [
            dict(zip(s["columns"], row, strict=True)) | s.get("tags", {})
            for s in influx.query(q)
            for row in s["values"]
        ]
        assert any(r["alertname"] == "OldFire" and r["firing"] is True for r in rows), rows
