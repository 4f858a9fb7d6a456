"""Generate rigmon's Grafana dashboards: a fleet overview and a box view, each for a
Prometheus and an InfluxDB (InfluxQL) datasource. Every panel is defined once here, with
its PromQL and InfluxQL queries; ``python dashboards/build.py`` rewrites the JSON files,
and the tests run every query against a real Prometheus and InfluxDB fed by rigmon.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

P_SEL = 'instance=~"$instance"'
P_GPU = 'instance=~"$instance", gpu=~"$gpu"'
I_HOST = '"host" =~ /^$host$/'
I_GPU = '"host" =~ /^$host$/ AND "gpu" =~ /^$gpu$/'

# (title, panel type, unit, [(PromQL, legend)], [(InfluxQL, alias)], width)
FLEET = [
    ("Boxes up", "stat", "none", [('up{job=~"$job"}', "{{instance}}")],
     [('SELECT last("gpus_answering") FROM "host" WHERE $timeFilter GROUP BY "host"', "$tag_host")], 6),
    ("GPUs answering / found at start", "stat", "none",
     [('rigmon_gpus{state="answering"}', "{{instance}} answering"), ('rigmon_gpus{state="at_start"}',
                                                                      "{{instance}} at start")],
     [('SELECT last("gpus_answering") AS "answering", last("gpus_at_start") AS "at start" FROM "host" '
       'WHERE $timeFilter GROUP BY "host"', "$tag_host $col")], 6),
    ("Firing alerts", "table", "none",
     [("sum by (instance, alertname, severity, subject) (rigmon_alert_active)", "")],
     [('SELECT last("firing") AS "firing", last("summary") AS "summary" FROM "alert" WHERE $timeFilter '
       'GROUP BY "host", "alertname", "severity", "subject"', "")], 12),
    ("GPU power per box", "timeseries", "watt", [("sum by (instance) (rigmon_gpu_power_watts)", "{{instance}}")],
     [('SELECT mean("gpu_power_watts") FROM "host" WHERE $timeFilter GROUP BY time($__interval), "host" '
       'fill(null)', "$tag_host")], 12),
    ("Hottest GPU per box", "timeseries", "celsius",
     [('max by (instance) (rigmon_gpu_temperature_celsius{sensor="gpu"})', "{{instance}}")],
     [('SELECT max("temperature_celsius") FROM "gpu" WHERE $timeFilter GROUP BY time($__interval), "host" '
       'fill(null)', "$tag_host")], 12),
    ("Hottest CPU per box", "timeseries", "celsius",
     [("max by (instance) (rigmon_cpu_temperature_celsius)", "{{instance}}")],
     [('SELECT max("celsius") FROM "cpu_temp" WHERE $timeFilter GROUP BY time($__interval), "host" fill(null)',
       "$tag_host")], 12),
    # only fans that have turned: an empty header reads 0 rpm for ever
    ("Slowest fan per box", "timeseries", "rpm",
     [("min by (instance) (rigmon_fan_speed_rpm and on (instance, chip, fan) (rigmon_fan_turned == 1))",
       "{{instance}}")],
     [('SELECT min("rpm") FROM "fan" WHERE "turned" = true AND $timeFilter GROUP BY time($__interval), "host" '
       'fill(null)', "$tag_host")], 12),
    ("GPU energy per day", "barchart", "kwatth",
     [("sum by (instance) (increase(rigmon_gpu_energy_joules_total[1d])) / 3.6e6", "{{instance}}")],
     [('SELECT sum("kwh") FROM (SELECT spread("energy_joules") / 3600000 AS "kwh" FROM "gpu" WHERE $timeFilter '
       'GROUP BY time(1d), "host", "gpu") GROUP BY time(1d), "host"', "$tag_host")], 12),
]

BOX = [
    ("GPU temperature against the slowdown threshold", "timeseries", "celsius",
     [(f'rigmon_gpu_temperature_celsius{{{P_GPU}, sensor="gpu"}}', "GPU {{gpu}}"),
      (f'rigmon_gpu_temperature_threshold_celsius{{{P_GPU}, threshold="slowdown"}}', "GPU {{gpu}} slowdown")],
     [(f'SELECT mean("temperature_celsius") AS "temperature", max("slowdown_celsius") AS "slowdown" FROM "gpu" '
       f'WHERE {I_GPU} AND $timeFilter GROUP BY time($__interval), "gpu" fill(null)', "GPU $tag_gpu $col")], 12),
    ("GPU memory temperature", "timeseries", "celsius",
     [(f'rigmon_gpu_temperature_celsius{{{P_GPU}, sensor="memory"}}', "GPU {{gpu}}")],
     [(f'SELECT mean("memory_temperature_celsius") FROM "gpu" WHERE {I_GPU} AND $timeFilter '
       f'GROUP BY time($__interval), "gpu" fill(null)', "GPU $tag_gpu")], 12),
    ("GPU power against the limit", "timeseries", "watt",
     [(f"rigmon_gpu_power_watts{{{P_GPU}}}", "GPU {{gpu}}"),
      (f"rigmon_gpu_power_limit_watts{{{P_GPU}}}", "GPU {{gpu}} limit")],
     [(f'SELECT mean("power_watts") AS "power", max("power_limit_watts") AS "limit" FROM "gpu" WHERE {I_GPU} '
       f'AND $timeFilter GROUP BY time($__interval), "gpu" fill(null)', "GPU $tag_gpu $col")], 12),
    ("GPU clocks", "timeseries", "hertz",
     [(f'rigmon_gpu_clock_hertz{{{P_GPU}, clock=~"sm|memory"}}', "GPU {{gpu}} {{clock}}")],
     [(f'SELECT mean("sm_clock_hertz") AS "sm", mean("memory_clock_hertz") AS "memory" FROM "gpu" WHERE {I_GPU} '
       f'AND $timeFilter GROUP BY time($__interval), "gpu" fill(null)', "GPU $tag_gpu $col")], 12),
    ("Clock-event reasons (throttling)", "state-timeline", "none",
     [(f'rigmon_gpu_clock_event_active{{{P_GPU}, reason!~"gpu_idle|applications_clocks_setting|'
       f'display_clock_setting"}}', "GPU {{gpu}} {{reason}}")],
     [(f'SELECT last("event_sw_power_cap") AS "sw_power_cap", last("event_sw_thermal_slowdown") AS '
       f'"sw_thermal_slowdown", last("event_hw_thermal_slowdown") AS "hw_thermal_slowdown", '
       f'last("event_hw_slowdown") AS "hw_slowdown", last("event_hw_power_brake_slowdown") AS '
       f'"hw_power_brake_slowdown" FROM "gpu" WHERE {I_GPU} AND $timeFilter GROUP BY time($__interval), "gpu" '
       f'fill(previous)', "GPU $tag_gpu $col")], 12),
    ("GPU utilisation", "timeseries", "percentunit",
     [(f'rigmon_gpu_utilization_ratio{{{P_GPU}}}', "GPU {{gpu}} {{kind}}")],
     [(f'SELECT mean("utilization_gpu_ratio") AS "gpu", mean("utilization_memory_ratio") AS "memory" FROM "gpu" '
       f'WHERE {I_GPU} AND $timeFilter GROUP BY time($__interval), "gpu" fill(null)', "GPU $tag_gpu $col")], 12),
    ("GPU memory used", "timeseries", "bytes",
     [(f"rigmon_gpu_memory_used_bytes{{{P_GPU}}}", "GPU {{gpu}}")],
     [(f'SELECT mean("memory_used_bytes") FROM "gpu" WHERE {I_GPU} AND $timeFilter GROUP BY time($__interval), '
       f'"gpu" fill(null)', "GPU $tag_gpu")], 12),
    ("PCIe link and replays", "timeseries", "none",
     [(f'rigmon_gpu_pcie_link_generation{{{P_GPU}, link="current"}}', "GPU {{gpu}} gen"),
      (f'rigmon_gpu_pcie_link_width{{{P_GPU}, link="current"}}', "GPU {{gpu}} width"),
      (f"increase(rigmon_gpu_pcie_replays_total{{{P_GPU}}}[5m])", "GPU {{gpu}} replays / 5 min")],
     [(f'SELECT last("pcie_generation") AS "gen", last("pcie_width") AS "width", spread("pcie_replays") AS '
       f'"replays" FROM "gpu" WHERE {I_GPU} AND $timeFilter GROUP BY time($__interval), "gpu" fill(null)',
       "GPU $tag_gpu $col")], 12),
    ("XID errors", "table", "none",
     [(f"rigmon_gpu_xid_errors_total{{{P_SEL}}}", "")],
     [(f'SELECT count("code") AS "count" FROM "xid" WHERE {I_HOST} AND $timeFilter GROUP BY "gpu", "xid"', "")],
     12),
    ("ECC and row remaps", "table", "none",
     [(f'rigmon_gpu_ecc_errors_total{{{P_GPU}, type="uncorrected"}}', ""),
      (f"rigmon_gpu_remapped_rows_pending{{{P_GPU}}}", "")],
     [(f'SELECT last("ecc_uncorrected_volatile") AS "uncorrected (volatile)", last("ecc_uncorrected_aggregate") AS '
       f'"uncorrected (lifetime)", last("remap_pending") AS "remap pending" FROM "gpu" WHERE {I_GPU} AND '
       f'$timeFilter GROUP BY "gpu"', "")], 12),
    ("GPU energy", "timeseries", "kwatth",
     [(f"rigmon_gpu_energy_joules_total{{{P_GPU}}} / 3.6e6", "GPU {{gpu}}")],
     [(f'SELECT last("energy_joules") / 3600000 FROM "gpu" WHERE {I_GPU} AND $timeFilter '
       f'GROUP BY time($__interval), "gpu" fill(null)', "GPU $tag_gpu")], 12),
    ("CPU temperature", "timeseries", "celsius",
     [(f"rigmon_cpu_temperature_celsius{{{P_SEL}}}", "CPU {{socket}} {{sensor}}")],
     [(f'SELECT mean("celsius") FROM "cpu_temp" WHERE {I_HOST} AND $timeFilter GROUP BY time($__interval), '
       f'"socket", "sensor" fill(null)', "CPU $tag_socket $tag_sensor")], 12),
    ("Fans", "timeseries", "rpm",
     [(f"rigmon_fan_speed_rpm{{{P_SEL}}}", "{{chip}}/{{fan}}")],
     [(f'SELECT mean("rpm") FROM "fan" WHERE {I_HOST} AND $timeFilter GROUP BY time($__interval), "chip", "fan" '
       f'fill(null)', "$tag_chip/$tag_fan")], 12),
    ("GPU fans: asked and turning", "timeseries", "rpm",
     [(f"rigmon_gpu_fan_speed_rpm{{{P_GPU}}}", "GPU {{gpu}} fan {{fan}} rpm"),
      (f"rigmon_gpu_fan_target_speed_ratio{{{P_GPU}}} * 100", "GPU {{gpu}} fan {{fan}} asked %")],
     [(f'SELECT mean("fan0_speed_rpm") AS "fan 0 rpm", mean("fan0_target_speed_ratio") * 100 AS "fan 0 asked %" '
       f'FROM "gpu" WHERE {I_GPU} AND $timeFilter GROUP BY time($__interval), "gpu" fill(null)',
       "GPU $tag_gpu $col")], 12),
    ("Power against each PSU budget", "timeseries", "watt",
     [(f"rigmon_power_budget_draw_watts{{{P_SEL}}}", "{{psu}} draw"),
      (f"rigmon_power_budget_watts{{{P_SEL}}}", "{{psu}} budget")],
     [(f'SELECT mean("draw_watts") AS "draw", max("budget_watts") AS "budget" FROM "power_budget" WHERE {I_HOST} '
       f'AND $timeFilter GROUP BY time($__interval), "psu" fill(null)', "$tag_psu $col")], 12),
    ("Firing alerts", "table", "none",
     [(f"rigmon_alert_active{{{P_SEL}}}", "")],
     [(f'SELECT last("firing") AS "firing", last("summary") AS "summary" FROM "alert" WHERE {I_HOST} AND '
       f'$timeFilter GROUP BY "alertname", "severity", "subject"', "")], 12),
]

# Prometheus sees the newest burn-in report through the daemon ([burnin] reports_dir);
# InfluxDB gets every burn-in's progress as it runs.
BOX_PROMETHEUS_ONLY = [
    ("Last burn-in", "stat", "none",
     [(f"rigmon_burnin_last_passed{{{P_SEL}}}", "passed (1) / failed (0)"),
      (f"rigmon_burnin_tokens_per_second{{{P_SEL}}}", "{{unit}} tokens/s"),
      (f"time() - rigmon_burnin_last_run_timestamp_seconds{{{P_SEL}}}", "seconds ago")], [], 24),
]
BOX_INFLUX_ONLY = [
    ("Burn-in runs: tokens/s and loss against the floor", "timeseries", "none", [],
     [(f'SELECT mean("tokens_per_s") AS "tokens/s" FROM "burnin" WHERE {I_HOST} AND $timeFilter '
       f'GROUP BY time($__interval), "run", "unit" fill(null)', "$tag_run $tag_unit $col"),
      (f'SELECT mean("loss") AS "loss", mean("floor") AS "floor" FROM "burnin" WHERE {I_HOST} AND $timeFilter '
       f'GROUP BY time($__interval), "run", "unit" fill(null)', "$tag_run $tag_unit $col")], 24),
]


def _panel(i: int, x: int, y: int, spec, kind: str) -> dict:
    title, ptype, unit, prom, influx, width = spec
    ds = {"type": kind, "uid": "${datasource}"}
    if kind == "prometheus":
        targets = [{"refId": chr(65 + n), "datasource": ds, "expr": q, "legendFormat": legend, "range": True,
                    "instant": ptype in ("table", "stat")} for n, (q, legend) in enumerate(prom)]
    else:
        targets = [{"refId": chr(65 + n), "datasource": ds, "query": q, "rawQuery": True, "alias": alias,
                    "resultFormat": "table" if ptype == "table" else "time_series"}
                   for n, (q, alias) in enumerate(influx)]
    panel = {"id": i, "type": ptype, "title": title, "datasource": ds, "gridPos": {"x": x, "y": y, "w": width,
                                                                                    "h": 8},
             "targets": targets, "fieldConfig": {"defaults": {"unit": unit}, "overrides": []}, "options": {}}
    if ptype == "state-timeline":
        panel["fieldConfig"]["defaults"]["mappings"] = [
            {"type": "value", "options": {"0": {"text": "off", "color": "transparent"},
                                          "1": {"text": "active", "color": "orange"},
                                          "false": {"text": "off", "color": "transparent"},
                                          "true": {"text": "active", "color": "orange"}}}]
    return panel


def _variables(kind: str, box: bool) -> list[dict]:
    ds = {"type": kind, "uid": "${datasource}"}
    out = [{"name": "datasource", "label": "Datasource", "type": "datasource", "query": kind, "current": {}}]

    def query(name, label, q, include_all=True):
        return {"name": name, "label": label, "type": "query", "datasource": ds, "query": q, "definition": q,
                "refresh": 2, "includeAll": include_all, "multi": include_all, "current": {}, "sort": 3}

    if kind == "prometheus":
        if box:
            out.append(query("instance", "Box", "label_values(rigmon_build_info, instance)", include_all=False))
            out.append(query("gpu", "GPU", 'label_values(rigmon_gpu_info{instance=~"$instance"}, gpu)'))
        else:
            out.append(query("job", "Job", "label_values(rigmon_build_info, job)"))
    else:
        out.append(query("host", "Box", 'SHOW TAG VALUES FROM "host" WITH KEY = "host"', include_all=not box))
        if box:
            out.append(query("gpu", "GPU", 'SHOW TAG VALUES FROM "gpu" WITH KEY = "gpu" WHERE "host" =~ /^$host$/'))
    return out


def dashboard(kind: str, box: bool) -> dict:
    only = BOX_INFLUX_ONLY if kind == "influxdb" else BOX_PROMETHEUS_ONLY
    specs = BOX + only if box else FLEET
    panels, x, y = [], 0, 0
    for i, spec in enumerate(specs, start=1):
        if not (spec[3] if kind == "prometheus" else spec[4]):
            continue
        width = spec[5]
        if x + width > 24:
            x, y = 0, y + 8
        panels.append(_panel(i, x, y, spec, kind))
        x += width
    view = "box" if box else "fleet"
    return {
        "uid": f"rigmon-{view}-{'prom' if kind == 'prometheus' else 'influx'}",
        "title": f"rigmon {'box' if box else 'fleet'} ({'Prometheus' if kind == 'prometheus' else 'InfluxDB'})",
        "tags": ["rigmon", "gpu", kind], "timezone": "browser", "schemaVersion": 39, "version": 1,
        "editable": True, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": _variables(kind, box)}, "annotations": {"list": []}, "panels": panels,
        "links": [{"title": "rigmon dashboards", "type": "dashboards", "tags": ["rigmon"]}],
    }


FILES = {f"rigmon-{view}-{kind}.json": (kind, view == "box") for view in ("fleet", "box")
         for kind in ("prometheus", "influxdb")}


def main() -> None:
    for name, (kind, box) in FILES.items():
        (HERE / name).write_text(json.dumps(dashboard(kind, box), indent=2) + "\n")


if __name__ == "__main__":
    main()
