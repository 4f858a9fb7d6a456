"""Generate rigmon's Grafana dashboards: a fleet overview and a box view, each for a
Prometheus and an InfluxDB (InfluxQL) datasource. Every panel is defined once here, with
its PromQL and InfluxQL queries; ``python dashboards/build.py`` rewrites the JSON files,
and the tests run every query against a real Prometheus and InfluxDB fed by rigmon.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent

P_SEL = 'instance=~"$instance"'
P_GPU = 'instance=~"$instance", gpu=~"$gpu"'
F_SEL = 'job=~"$job", site=~"$site"'  # the fleet: Prometheus's job, and the site label the targets give
I_HOST = '"host" =~ /^$host$/'
# an alert is one point per transition: whether it fires now is its last one, however long ago
# (not the last within the range shown, which an alert that began before the range has none in)
ALERTS_SINCE = "time > now() - 30d"
I_GPU = '"host" =~ /^$host$/ AND "gpu" =~ /^$gpu$/'
ROW = "row"


class Panel(NamedTuple):
    """One panel for both datasources. ``prom``: [(PromQL, legend)]; ``influx``: [(InfluxQL, alias)];
    one query a unit. ``axes``: {query index: (unit, axis label)} for a query in another unit than
    ``unit``, drawn against its own axis on the right."""

    title: str
    type: str  # timeseries | stat | table | barchart | state-timeline | row
    unit: str
    prom: list
    influx: list
    width: int
    description: str
    axes: dict | None = None
    mappings: list | None = None
    step: str | None = None  # Grafana's min interval: a bar a day reads each day once, not once a step


def row(title: str, description: str) -> Panel:
    return Panel(title, ROW, "none", [], [], 24, description)


ACTIVE = [
    {
        "type": "value",
        "options": {
            "0": {"text": "off", "color": "transparent"},
            "1": {"text": "active", "color": "orange"},
            "false": {"text": "off", "color": "transparent"},
            "true": {"text": "active", "color": "orange"},
        },
    }
]
SUCCESS = [
    {"type": "value", "options": {"0": {"text": "failing", "color": "red"}, "1": {"text": "ok", "color": "green"}}}
]

# The fleet's per-box series are rigmon-rules.yml's recording rules (group rigmon-fleet): a panel
# reads one series a box, whatever the box's GPUs and sensors.
FLEET = [
    Panel(
        "Boxes up",
        "stat",
        "none",
        [(f"up{{{F_SEL}}}", "{{instance}}")],
        [(f'SELECT last("gpus_answering") FROM "host" WHERE {I_HOST} AND $timeFilter GROUP BY "host"', "$tag_host")],
        6,
        "Whether Prometheus reaches each box's rigmon (1 up, 0 down); InfluxDB: the boxes that wrote lately.",
    ),
    Panel(
        "GPUs answering / found at start",
        "stat",
        "none",
        [
            (f'rigmon_gpus{{{F_SEL}, state="answering"}}', "{{instance}} answering"),
            (f'rigmon_gpus{{{F_SEL}, state="at_start"}}', "{{instance}} at start"),
        ],
        [
            (
                'SELECT last("gpus_answering") AS "answering", last("gpus_at_start") AS "at start" FROM "host" '
                f'WHERE {I_HOST} AND $timeFilter GROUP BY "host"',
                "$tag_host $col",
            )
        ],
        6,
        "GPUs that answer NVML now against those found when rigmon started: fewer means one fell off the bus.",
    ),
    Panel(
        "Firing alerts",
        "table",
        "none",
        [(f"sum by (instance, alertname, severity, subject) (rigmon_alert_active{{{F_SEL}}})", "")],
        [
            (
                'SELECT last("firing") AS "firing", last("summary") AS "summary" FROM "alert" WHERE '
                f'{I_HOST} AND {ALERTS_SINCE} GROUP BY "host", "alertname", "severity", "subject"',
                "",
            )
        ],
        12,
        "Every alert firing now, on every box, from rigmon's own rules (rigmon rules list); with InfluxDB, "
        "each alert's last transition in 30 days, whatever the range shown: one that began before it is "
        "still firing.",
    ),
    Panel(
        "GPU power per box",
        "timeseries",
        "watt",
        [(f"sum by (instance) (instance:rigmon_gpu_power_watts:sum{{{F_SEL}}})", "{{instance}}")],
        [
            (
                f'SELECT mean("gpu_power_watts") FROM "host" WHERE {I_HOST} AND $timeFilter '
                f'GROUP BY time($__interval), "host" fill(null)',
                "$tag_host",
            )
        ],
        12,
        "All GPUs of a box together, in watts: compare with the PSU's rating.",
    ),
    Panel(
        "Hottest GPU per box",
        "timeseries",
        "celsius",
        [(f"max by (instance) (instance:rigmon_gpu_temperature_celsius:max{{{F_SEL}}})", "{{instance}}")],
        [
            (
                f'SELECT max("temperature_celsius") FROM "gpu" WHERE {I_HOST} AND $timeFilter '
                f'GROUP BY time($__interval), "host" fill(null)',
                "$tag_host",
            )
        ],
        12,
        "The hottest GPU core of each box; the box dashboard shows each GPU against its slowdown threshold.",
    ),
    Panel(
        "Hottest CPU per box",
        "timeseries",
        "celsius",
        [(f"max by (instance) (instance:rigmon_cpu_temperature_celsius:max{{{F_SEL}}})", "{{instance}}")],
        [
            (
                f'SELECT max("celsius") FROM "cpu_temp" WHERE {I_HOST} AND $timeFilter GROUP BY time($__interval), '
                f'"host" fill(null)',
                "$tag_host",
            )
        ],
        12,
        "The hottest CPU sensor of each box: a CPU that climbs while the GPUs work points at airflow.",
    ),
    # only fans that have turned: an empty header reads 0 rpm for ever
    Panel(
        "Slowest fan per box",
        "timeseries",
        "rpm",
        [(f"min by (instance) (instance:rigmon_fan_speed_rpm:min{{{F_SEL}}})", "{{instance}}")],
        [
            (
                f'SELECT min("rpm") FROM "fan" WHERE "turned" = true AND {I_HOST} AND $timeFilter '
                f'GROUP BY time($__interval), "host" fill(null)',
                "$tag_host",
            )
        ],
        12,
        "The slowest case or CPU fan of each box among those that have ever turned (an empty header reads "
        "0 rpm for ever): a fan that stops drops to 0 here.",
    ),
    Panel(
        "GPU energy per day",
        "barchart",
        "kwatth",
        [
            (
                f"sum by (instance) (sum_over_time(instance:rigmon_gpu_energy_joules:increase1m{{{F_SEL}}}[1d]))"
                " / 3.6e6",
                "{{instance}}",
            )
        ],
        [
            (
                'SELECT sum("kwh") FROM (SELECT spread("energy_joules") / 3600000 AS "kwh" FROM "gpu" WHERE '
                f'{I_HOST} AND $timeFilter GROUP BY time(1d), "host", "gpu") GROUP BY time(1d), "host"',
                "$tag_host",
            )
        ],
        12,
        "Energy the GPUs of each box used per day, in kWh, from the GPUs' own energy counters.",
        step="1d",
    ),
    Panel(
        "GPUs whose cooling drifted most",
        "table",
        "celsius",
        [(f"topk(10, rigmon_gpu_cooling_drift_celsius{{{F_SEL}}})", "{{instance}} GPU {{gpu}}")],
        [
            (
                'SELECT last("cooling_drift_celsius") AS "drift", last("cooling_drift_own_celsius") AS "its own" '
                f'FROM "gpu" WHERE {I_HOST} AND $timeFilter GROUP BY "host", "gpu"',
                "",
            )
        ],
        12,
        "The fleet's GPUs that run hottest against their own baselines at the same power: the ones to clean "
        "or repaste first.",
    ),
    row("rigmon itself", "Whether each box's rigmon keeps up: its polls, its readers, and what it could not deliver."),
    Panel(
        "Poll duration per box",
        "timeseries",
        "s",
        [(f"max by (instance) (instance:rigmon_poll_duration_seconds:max{{{F_SEL}}})", "{{instance}}")],
        [],
        8,
        "How long the last poll took; near the interval, polls start to be skipped.",
    ),
    Panel(
        "Readers working per box",
        "state-timeline",
        "none",
        [(f"min by (instance) (instance:rigmon_reader_success:min{{{F_SEL}}})", "{{instance}}")],
        [],
        8,
        "ok while every reader (GPU, host) works; failing when one does not: no NVML, no GPUs, a failure.",
        mappings=SUCCESS,
    ),
    Panel(
        "Undelivered per box (last hour)",
        "timeseries",
        "none",
        [
            (
                f"sum by (instance) (instance:rigmon_influxdb_points_dropped:increase1h{{{F_SEL}}})",
                "{{instance}} InfluxDB points dropped",
            ),
            (
                f"sum by (instance) (instance:rigmon_notifications_failed:increase1h{{{F_SEL}}})",
                "{{instance}} notifications failed",
            ),
            (
                f"sum by (instance) (instance:rigmon_notifications_queued:sum{{{F_SEL}}})",
                "{{instance}} notifications waiting",
            ),
        ],
        [],
        8,
        "Points dropped from a full spool and notifications given up on in the last hour, and notifications "
        "waiting now (a receiver down, refusing or slow), for the boxes that have any: none is the norm. "
        "RigmonNotificationsUndelivered warns when they wait 5 minutes.",
    ),
]

BOX = [
    Panel(
        "GPU temperature against the slowdown threshold",
        "timeseries",
        "celsius",
        [
            (f'rigmon_gpu_temperature_celsius{{{P_GPU}, sensor="gpu"}}', "GPU {{gpu}}"),
            (f'rigmon_gpu_temperature_threshold_celsius{{{P_GPU}, threshold="slowdown"}}', "GPU {{gpu}} slowdown"),
        ],
        [
            (
                f'SELECT mean("temperature_celsius") AS "temperature", max("slowdown_celsius") AS "slowdown" '
                f'FROM "gpu" '
                f'WHERE {I_GPU} AND $timeFilter GROUP BY time($__interval), "gpu" fill(null)',
                "GPU $tag_gpu $col",
            )
        ],
        12,
        "Each GPU's core temperature and the threshold where its clocks are cut for heat.",
    ),
    Panel(
        "GPU memory temperature",
        "timeseries",
        "celsius",
        [(f'rigmon_gpu_temperature_celsius{{{P_GPU}, sensor="memory"}}', "GPU {{gpu}}")],
        [
            (
                f'SELECT mean("memory_temperature_celsius") FROM "gpu" WHERE {I_GPU} AND $timeFilter '
                f'GROUP BY time($__interval), "gpu" fill(null)',
                "GPU $tag_gpu",
            )
        ],
        12,
        "HBM or GDDR temperature, where the board reports it (GDDR6X cards run their memory hottest).",
    ),
    Panel(
        "GPU power against the limit",
        "timeseries",
        "watt",
        [
            (f"rigmon_gpu_power_watts{{{P_GPU}}}", "GPU {{gpu}}"),
            (f"rigmon_gpu_power_limit_watts{{{P_GPU}}}", "GPU {{gpu}} limit"),
        ],
        [
            (
                f'SELECT mean("power_watts") AS "power", max("power_limit_watts") AS "limit" FROM "gpu" WHERE {I_GPU} '
                f'AND $timeFilter GROUP BY time($__interval), "gpu" fill(null)',
                "GPU $tag_gpu $col",
            )
        ],
        12,
        "Power draw against the enforced limit: a busy GPU far below its limit is starved.",
    ),
    Panel(
        "GPU clocks",
        "timeseries",
        "hertz",
        [(f'rigmon_gpu_clock_hertz{{{P_GPU}, clock=~"sm|memory"}}', "GPU {{gpu}} {{clock}}")],
        [
            (
                f'SELECT mean("sm_clock_hertz") AS "sm", mean("memory_clock_hertz") AS "memory" FROM "gpu" WHERE '
                f'{I_GPU} AND $timeFilter GROUP BY time($__interval), "gpu" fill(null)',
                "GPU $tag_gpu $col",
            )
        ],
        12,
        "SM and memory clocks: a drop under load with a clock-event reason beside it is throttling.",
    ),
    Panel(
        "Clock-event reasons (throttling)",
        "state-timeline",
        "none",
        [
            (
                f'rigmon_gpu_clock_event_active{{{P_GPU}, reason!~"gpu_idle|applications_clocks_setting|'
                f'display_clock_setting"}}',
                "GPU {{gpu}} {{reason}}",
            )
        ],
        [
            (
                f'SELECT last("event_sw_power_cap") AS "sw_power_cap", last("event_sw_thermal_slowdown") AS '
                f'"sw_thermal_slowdown", last("event_hw_thermal_slowdown") AS "hw_thermal_slowdown", '
                f'last("event_hw_slowdown") AS "hw_slowdown", last("event_hw_power_brake_slowdown") AS '
                f'"hw_power_brake_slowdown" FROM "gpu" WHERE {I_GPU} AND $timeFilter GROUP BY time($__interval), "gpu" '
                f"fill(previous)",
                "GPU $tag_gpu $col",
            )
        ],
        12,
        "Why the clocks are held down, over time: sw_power_cap is normal at full load; thermal, HW slowdown "
        "and power brake are not.",
        mappings=ACTIVE,
    ),
    Panel(
        "GPU utilisation",
        "timeseries",
        "percentunit",
        [(f"rigmon_gpu_utilization_ratio{{{P_GPU}}}", "GPU {{gpu}} {{kind}}")],
        [
            (
                f'SELECT mean("utilization_gpu_ratio") AS "gpu", mean("utilization_memory_ratio") AS "memory" FROM '
                f'"gpu" WHERE {I_GPU} AND $timeFilter GROUP BY time($__interval), "gpu" fill(null)',
                "GPU $tag_gpu $col",
            )
        ],
        12,
        "Share of time a kernel ran (gpu) and the memory controller was busy (memory); 100 % busy says nothing "
        "of how hard: read it beside power.",
    ),
    Panel(
        "GPU memory used",
        "timeseries",
        "bytes",
        [(f"rigmon_gpu_memory_used_bytes{{{P_GPU}}}", "GPU {{gpu}}")],
        [
            (
                f'SELECT mean("memory_used_bytes") FROM "gpu" WHERE {I_GPU} AND $timeFilter '
                f'GROUP BY time($__interval), "gpu" fill(null)',
                "GPU $tag_gpu",
            )
        ],
        12,
        "Device memory in use.",
    ),
    Panel(
        "PCIe link generation",
        "timeseries",
        "none",
        [(f'rigmon_gpu_pcie_link_generation{{{P_GPU}, link="current"}}', "GPU {{gpu}} gen")],
        [
            (
                f'SELECT last("pcie_generation") AS "gen" FROM "gpu" WHERE {I_GPU} AND $timeFilter '
                f'GROUP BY time($__interval), "gpu" fill(null)',
                "GPU $tag_gpu $col",
            )
        ],
        8,
        "The link's current PCIe generation: it drops at idle by design; below the maximum under load "
        "points at a riser or slot.",
    ),
    Panel(
        "PCIe link width",
        "timeseries",
        "none",
        [(f'rigmon_gpu_pcie_link_width{{{P_GPU}, link="current"}}', "GPU {{gpu}} lanes")],
        [
            (
                f'SELECT last("pcie_width") AS "lanes" FROM "gpu" WHERE {I_GPU} AND $timeFilter '
                f'GROUP BY time($__interval), "gpu" fill(null)',
                "GPU $tag_gpu $col",
            )
        ],
        8,
        "Lanes the link trained to (x16, x8…): fewer than the slot gives points at a riser or seating.",
    ),
    Panel(
        "PCIe replays per 5 min",
        "timeseries",
        "none",
        [(f"increase(rigmon_gpu_pcie_replays_total{{{P_GPU}}}[5m])", "GPU {{gpu}} replays")],
        [
            (
                f'SELECT spread("pcie_replays") AS "replays" FROM "gpu" WHERE {I_GPU} AND $timeFilter '
                f'GROUP BY time(5m), "gpu" fill(null)',
                "GPU $tag_gpu $col",
            )
        ],
        8,
        "Packets the link had to resend: a steady rise is a marginal riser cable or connector.",
    ),
    Panel(
        "XID errors",
        "table",
        "none",
        # a GPU without an XID since rigmon started shows a row of 0 (xid "none"), not an empty panel
        [
            (
                f"rigmon_gpu_xid_errors_total{{{P_GPU}}} or on (instance, gpu) "
                f'label_replace(rigmon_gpu_up{{{P_GPU}}} * 0, "xid", "none", "", "")',
                "",
            )
        ],
        [(f'SELECT count("code") AS "count" FROM "xid" WHERE {I_GPU} AND $timeFilter GROUP BY "gpu", "xid"', "")],
        12,
        "XID errors the driver reported since rigmon started, by GPU and code (79: fell off the bus; 48: "
        'uncorrectable ECC…); 0 with xid "none" for a GPU that had none.',
    ),
    Panel(
        "ECC and row remaps",
        "table",
        "none",
        [
            (f'rigmon_gpu_ecc_errors_total{{{P_GPU}, type="uncorrected"}}', ""),
            (f"rigmon_gpu_remapped_rows_pending{{{P_GPU}}}", ""),
        ],
        [
            (
                f'SELECT last("ecc_uncorrected_volatile") AS "uncorrected (volatile)", '
                f'last("ecc_uncorrected_aggregate") '
                f'AS "uncorrected (lifetime)", last("remap_pending") AS "remap pending" FROM "gpu" WHERE {I_GPU} AND '
                f'$timeFilter GROUP BY "gpu"',
                "",
            )
        ],
        12,
        "Uncorrectable memory errors and row remaps waiting for a reset: any rise is a GPU to watch.",
    ),
    Panel(
        "GPU energy",
        "timeseries",
        "kwatth",
        [(f"rigmon_gpu_energy_joules_total{{{P_GPU}}} / 3.6e6", "GPU {{gpu}}")],
        [
            (
                f'SELECT last("energy_joules") / 3600000 FROM "gpu" WHERE {I_GPU} AND $timeFilter '
                f'GROUP BY time($__interval), "gpu" fill(null)',
                "GPU $tag_gpu",
            )
        ],
        12,
        "Each GPU's energy counter since the driver loaded, in kWh.",
    ),
    Panel(
        "CPU temperature",
        "timeseries",
        "celsius",
        [(f"rigmon_cpu_temperature_celsius{{{P_SEL}}}", "CPU {{socket}} {{sensor}}")],
        [
            (
                f'SELECT mean("celsius") FROM "cpu_temp" WHERE {I_HOST} AND $timeFilter GROUP BY time($__interval), '
                f'"socket", "sensor" fill(null)',
                "CPU $tag_socket $tag_sensor",
            )
        ],
        12,
        "CPU package and core temperatures (coretemp, k10temp).",
    ),
    Panel(
        "Fans",
        "timeseries",
        "rpm",
        [(f"rigmon_fan_speed_rpm{{{P_SEL}}}", "{{chip}}/{{fan}}")],
        [
            (
                f'SELECT mean("rpm") FROM "fan" WHERE {I_HOST} AND $timeFilter GROUP BY time($__interval), "chip", '
                f'"fan" fill(null)',
                "$tag_chip/$tag_fan",
            )
        ],
        12,
        "Case and CPU fans the motherboard reports; one that drops to 0 has stopped.",
    ),
    Panel(
        "GPU fans: asked and turning",
        "timeseries",
        "rpm",
        [
            (f"rigmon_gpu_fan_speed_rpm{{{P_GPU}}}", "GPU {{gpu}} fan {{fan}} rpm"),
            (f"rigmon_gpu_fan_target_speed_ratio{{{P_GPU}}}", "GPU {{gpu}} fan {{fan}} asked"),
        ],
        [
            (
                f'SELECT mean("fan0_speed_rpm") AS "fan 0 rpm" FROM "gpu" WHERE {I_GPU} AND $timeFilter '
                f'GROUP BY time($__interval), "gpu" fill(null)',
                "GPU $tag_gpu $col",
            ),
            (
                f'SELECT mean("fan0_target_speed_ratio") AS "fan 0 asked" FROM "gpu" WHERE {I_GPU} AND $timeFilter '
                f'GROUP BY time($__interval), "gpu" fill(null)',
                "GPU $tag_gpu $col",
            ),
        ],
        12,
        "Measured rpm (left axis) against the speed the driver asks for (right axis, %): asked high and "
        "turning slowly is a failing fan.",
        axes={1: ("percentunit", "asked")},
    ),
    Panel(
        "Cooling against its own past",
        "timeseries",
        "celsius",
        [
            (f"rigmon_gpu_cooling_drift_celsius{{{P_GPU}}}", "GPU {{gpu}}"),
            (f"rigmon_gpu_cooling_drift_shared_celsius{{{P_SEL}}}", "every GPU (the room, the chassis)"),
        ],
        [
            (
                f'SELECT mean("cooling_drift_celsius") FROM "gpu" WHERE {I_GPU} AND $timeFilter '
                f'GROUP BY time($__interval), "gpu" fill(null)',
                "GPU $tag_gpu",
            ),
            (
                f'SELECT mean("gpu_cooling_drift_shared_celsius") FROM "host" WHERE {I_HOST} AND $timeFilter '
                "GROUP BY time($__interval) fill(null)",
                "every GPU (the room, the chassis)",
            ),
        ],
        12,
        "How much hotter over the room each GPU runs than its own baseline (its first days of steady load) at "
        "the same power, over its last hours of steady load: dust, dried paste, a slowing fan build up here "
        "for weeks before it throttles. The rise every GPU shares is the room's or the chassis'.",
    ),
    Panel(
        "Cooling baseline: learning",
        "stat",
        "s",
        [(f"rigmon_gpu_cooling_learning_seconds{{{P_GPU}}}", "GPU {{gpu}}")],
        [
            (
                f'SELECT last("cooling_learning_seconds") FROM "gpu" WHERE {I_GPU} AND $timeFilter GROUP BY "gpu"',
                "GPU $tag_gpu",
            )
        ],
        12,
        "Steady load still to see before each GPU's cooling baseline is learned ([cooling] learn; 0: learned, "
        "rigmon baseline show lists it).",
    ),
    Panel(
        "Power against each PSU budget",
        "timeseries",
        "watt",
        [
            (f"rigmon_power_budget_draw_watts{{{P_SEL}}}", "{{psu}} draw"),
            (f"rigmon_power_budget_watts{{{P_SEL}}}", "{{psu}} budget"),
        ],
        [
            (
                f'SELECT mean("draw_watts") AS "draw", max("budget_watts") AS "budget" FROM "power_budget" WHERE '
                f'{I_HOST} AND $timeFilter GROUP BY time($__interval), "psu" fill(null)',
                "$tag_psu $col",
            )
        ],
        12,
        "What each PSU group draws against the budget set in [alerts.power_budget].",
    ),
    Panel(
        "Firing alerts",
        "table",
        "none",
        [(f"rigmon_alert_active{{{P_SEL}}}", "")],
        [
            (
                f'SELECT last("firing") AS "firing", last("summary") AS "summary" FROM "alert" WHERE {I_HOST} AND '
                f'{ALERTS_SINCE} GROUP BY "alertname", "severity", "subject"',
                "",
            )
        ],
        12,
        "Alerts firing on this box now, with their subject (GPU, fan, socket, PSU group); with InfluxDB, "
        "each alert's last transition in 30 days, whatever the range shown.",
    ),
]

VERDICTS = [
    ("pass", "PASS", "green"),
    ("fail", "FAIL", "red"),
    ("interrupted", "interrupted", "orange"),
    ("could not run", "could not run", "orange"),
    ("never run", "never run", "text"),
]

# Prometheus sees the newest burn-in report and rigmon's own health through the daemon;
# InfluxDB gets every burn-in's progress as it runs.
BOX_PROMETHEUS_ONLY = [
    row("Last burn-in", "The newest report in [burnin] reports_dir: rigmon burnin's verdict and figures."),
    Panel(
        "Last burn-in verdict",
        "stat",
        "none",
        [
            (
                "max without (verdict) ("
                + " or ".join(
                    f'rigmon_burnin_last_verdict{{{P_SEL}, verdict="{v}"}} * {n}'
                    for n, (v, _, _) in enumerate(VERDICTS)
                )
                + ")",
                "verdict",
            )
        ],
        [],
        8,
        "PASS, FAIL, interrupted (stopped by a signal: no hardware was judged), could not run (no GPU "
        "that PyTorch could use) or never run (no report in [burnin] reports_dir).",
        mappings=[
            {
                "type": "value",
                "options": {
                    str(n): {"text": text, "color": color, "index": n} for n, (_, text, color) in enumerate(VERDICTS)
                },
            }
        ],
    ),
    Panel(
        "Last burn-in: how long ago, how long",
        "stat",
        "s",
        [
            (f"time() - rigmon_burnin_last_run_timestamp_seconds{{{P_SEL}}}", "ago"),
            (f"rigmon_burnin_last_duration_seconds{{{P_SEL}}}", "length"),
        ],
        [],
        8,
        "When the last burn-in started, and how long it ran.",
    ),
    Panel(
        "Last burn-in throughput",
        "stat",
        "none",
        [(f"rigmon_burnin_tokens_per_second{{{P_SEL}}}", "{{unit}} tokens/s")],
        [],
        8,
        "Tokens per second each unit trained at (the report has its MFU beside): compare across runs; a GPU "
        "slower than its twins fails the burn-in.",
    ),
    row("rigmon itself", "Whether rigmon keeps up on this box: its polls, readers, spool and notifiers."),
    Panel(
        "Poll and reader duration",
        "timeseries",
        "s",
        [
            (f"rigmon_poll_duration_seconds{{{P_SEL}}}", "poll"),
            (f"rigmon_reader_duration_seconds{{{P_SEL}}}", "{{reader}} reader"),
        ],
        [],
        8,
        "How long the last poll, and each reader in it, took: near the interval, polls start to be skipped.",
    ),
    Panel(
        "Polls skipped and failed (5 min)",
        "timeseries",
        "none",
        [
            (f"increase(rigmon_polls_skipped_total{{{P_SEL}}}[5m])", "skipped"),
            (f"increase(rigmon_polls_failed_total{{{P_SEL}}}[5m])", "failed"),
        ],
        [],
        8,
        "Polls skipped because the one before overran, and polls that raised: 0 is the norm.",
    ),
    Panel(
        "Readers working",
        "state-timeline",
        "none",
        [(f"rigmon_reader_success{{{P_SEL}}}", "{{reader}}")],
        [],
        8,
        "ok while the reader works; failing: no NVML, no GPUs, or a failure (rigmon doctor says why).",
        mappings=SUCCESS,
    ),
    Panel(
        "InfluxDB spool backlog",
        "timeseries",
        "none",
        [(f"rigmon_influxdb_spool_points{{{P_SEL}}}", "points spooled")],
        [],
        8,
        "Points waiting on disk while InfluxDB is away; they drain when it answers again.",
    ),
    Panel(
        "Points dropped and failed (5 min)",
        "timeseries",
        "none",
        [
            (f"increase(rigmon_influxdb_points_dropped_total{{{P_SEL}}}[5m])", "dropped"),
            (f"increase(rigmon_influxdb_points_failed_total{{{P_SEL}}}[5m])", "rejected"),
        ],
        [],
        8,
        "Points lost from a full spool, or rejected by InfluxDB as malformed (kept as *.rejected).",
    ),
    Panel(
        "Notifications failed and dropped (5 min)",
        "timeseries",
        "none",
        [
            (f"increase(rigmon_notifications_failed_total{{{P_SEL}}}[5m])", "{{notifier}} failed"),
            (f"increase(rigmon_notifications_dropped_total{{{P_SEL}}}[5m])", "{{notifier}} dropped"),
        ],
        [],
        8,
        "Alert notifications given up on or dropped from a full queue, per notifier.",
    ),
]
BOX_INFLUX_ONLY = [
    Panel(
        "Burn-in runs: tokens/s",
        "timeseries",
        "none",
        [],
        [
            (
                f'SELECT mean("tokens_per_s") AS "tokens/s" FROM "burnin" WHERE {I_HOST} AND $timeFilter '
                f'GROUP BY time($__interval), "run", "unit" fill(null)',
                "$tag_run $tag_unit $col",
            )
        ],
        12,
        "Each burn-in run's training throughput as it ran.",
    ),
    Panel(
        "Burn-in runs: loss against the floor",
        "timeseries",
        "none",
        [],
        [
            (
                f'SELECT mean("loss") AS "loss", mean("floor") AS "floor" FROM "burnin" WHERE {I_HOST} AND '
                f'$timeFilter GROUP BY time($__interval), "run", "unit" fill(null)',
                "$tag_run $tag_unit $col",
            )
        ],
        12,
        "The training loss (nats) approaching the data's entropy floor: a gap that stays points at wrong arithmetic.",
    ),
]


# What a panel says where its query has no data on a normal box (Grafana's "No value"): the
# reason, never a bare "No data" that reads like a broken dashboard.
NO_DATA = {
    "Firing alerts": "no alert firing",
    "Clock-event reasons (throttling)": "no clock-event reason active: full clocks",
    "Hottest CPU per box": "no CPU temperature sensor on these boxes",
    "Slowest fan per box": "no fan that has turned on these boxes",
    "Undelivered per box (last hour)": "nothing undelivered: every point and notification got through",
    "GPU memory temperature": "this GPU reports no memory temperature",
    "CPU temperature": "no CPU temperature sensor (a VM, a container, or no hwmon driver loaded)",
    "Fans": "no fan sensors (no hwmon fan driver loaded)",
    "GPU fans: asked and turning": "no GPU fans reported (a passive board)",
    "Cooling against its own past": "learning each GPU's baseline (its first days of steady load)",
    "GPUs whose cooling drifted most": "no GPU has a learned cooling baseline yet",
    "Power against each PSU budget": "no power budget configured ([alerts.power_budget])",
    "Last burn-in: how long ago, how long": "never run",
    "Last burn-in throughput": "never run",
    "Burn-in runs: tokens/s": "never run",
    "Burn-in runs: loss against the floor": "never run",
    "InfluxDB spool backlog": "InfluxDB not configured",
    "Points dropped and failed (5 min)": "InfluxDB not configured",
    "Notifications failed and dropped (5 min)": "no notifier configured",
    "XID errors": "no XID since rigmon started",
    "ECC and row remaps": "no ECC or row-remap counters on this GPU",
}


def _panel(i: int, x: int, y: int, spec: Panel, kind: str) -> dict:
    ds = {"type": kind, "uid": "${datasource}"}
    if spec.type == ROW:
        return {
            "id": i,
            "type": ROW,
            "title": spec.title,
            "description": spec.description,
            "collapsed": False,
            "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
            "panels": [],
        }
    if kind == "prometheus":
        targets = [
            {
                "refId": chr(65 + n),
                "datasource": ds,
                "expr": q,
                "legendFormat": legend,
                # a table or stat shows the value now: one instant query, not a range besides
                "range": spec.type not in ("table", "stat"),
                "instant": spec.type in ("table", "stat"),
            }
            for n, (q, legend) in enumerate(spec.prom)
        ]
    else:
        targets = [
            {
                "refId": chr(65 + n),
                "datasource": ds,
                "query": q,
                "rawQuery": True,
                "alias": alias,
                "resultFormat": "table" if spec.type == "table" else "time_series",
            }
            for n, (q, alias) in enumerate(spec.influx)
        ]
    overrides = []
    for n, (unit, label) in sorted((spec.axes or {}).items()):
        if n >= len(targets):
            continue
        properties = [{"id": "unit", "value": unit}]
        if spec.type == "timeseries":  # its own axis, on the right, named
            properties += [{"id": "custom.axisPlacement", "value": "right"}, {"id": "custom.axisLabel", "value": label}]
        overrides.append({"matcher": {"id": "byFrameRefID", "options": chr(65 + n)}, "properties": properties})
    panel = {
        "id": i,
        "type": spec.type,
        "title": spec.title,
        "description": spec.description,
        "datasource": ds,
        "gridPos": {"x": x, "y": y, "w": spec.width, "h": 8},
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": spec.unit}, "overrides": overrides},
        "options": {},
    }
    if spec.mappings:
        panel["fieldConfig"]["defaults"]["mappings"] = spec.mappings
    if spec.step:
        panel["interval"] = spec.step
    if spec.title in NO_DATA:
        panel["fieldConfig"]["defaults"]["noValue"] = NO_DATA[spec.title]
    return panel


def _variables(kind: str, box: bool) -> list[dict]:
    ds = {"type": kind, "uid": "${datasource}"}
    out = [{"name": "datasource", "label": "Datasource", "type": "datasource", "query": kind, "current": {}}]

    def query(name, label, q, include_all=True):
        return {
            "name": name,
            "label": label,
            "type": "query",
            "datasource": ds,
            "query": q,
            "definition": q,
            "refresh": 2,
            "includeAll": include_all,
            "multi": include_all,
            "current": {},
            "sort": 3,
        }

    if kind == "prometheus":
        if box:
            out.append(query("instance", "Box", "label_values(rigmon_build_info, instance)", include_all=False))
            out.append(query("gpu", "GPU", 'label_values(rigmon_gpu_info{instance=~"$instance"}, gpu)'))
        else:
            out.append(query("job", "Job", "label_values(rigmon_build_info, job)"))
            # boxes without a site label stay in "All"
            out.append(dict(query("site", "Site", 'label_values(rigmon_build_info{job=~"$job"}, site)'), allValue=".*"))
    else:
        out.append(query("host", "Box", 'SHOW TAG VALUES FROM "host" WITH KEY = "host"', include_all=not box))
        if box:
            out.append(query("gpu", "GPU", 'SHOW TAG VALUES FROM "gpu" WITH KEY = "gpu" WHERE "host" =~ /^$host$/'))
    return out


def _until_next_row(specs: list[Panel]) -> list[Panel]:
    return [p for p in specs[: next((n for n, p in enumerate(specs) if p.type == ROW), len(specs))]]


def dashboard(kind: str, box: bool) -> dict:
    only = BOX_INFLUX_ONLY if kind == "influxdb" else BOX_PROMETHEUS_ONLY
    specs = BOX + only if box else FLEET
    panels, x, y = [], 0, 0
    for i, spec in enumerate(specs, start=1):
        if spec.type == ROW and not any(
            p.prom if kind == "prometheus" else p.influx for p in _until_next_row(specs[i:])
        ):
            continue  # a row with nothing for this datasource
        if spec.type == ROW:
            y, x = y + (8 if x else 0), 0
            panels.append(_panel(i, 0, y, spec, kind))
            y += 1
            continue
        if not (spec.prom if kind == "prometheus" else spec.influx):
            continue
        if x + spec.width > 24:
            x, y = 0, y + 8
        panels.append(_panel(i, x, y, spec, kind))
        x += spec.width
    view = "box" if box else "fleet"
    return {
        "uid": f"rigmon-{view}-{'prom' if kind == 'prometheus' else 'influx'}",
        "title": f"rigmon {'box' if box else 'fleet'} ({'Prometheus' if kind == 'prometheus' else 'InfluxDB'})",
        "tags": ["rigmon", "gpu", kind],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": _variables(kind, box)},
        "annotations": {"list": []},
        "panels": panels,
        "links": [{"title": "rigmon dashboards", "type": "dashboards", "tags": ["rigmon"]}],
    }


FILES = {
    f"rigmon-{view}-{kind}.json": (kind, view == "box")
    for view in ("fleet", "box")
    for kind in ("prometheus", "influxdb")
}


def main() -> None:
    for name, (kind, box) in FILES.items():
        (HERE / name).write_text(json.dumps(dashboard(kind, box), indent=2) + "\n")


if __name__ == "__main__":
    main()
