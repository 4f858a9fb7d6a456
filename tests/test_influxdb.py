"""The InfluxDB sink against a real InfluxDB (Debian's influxd, started on loopback)."""

import re
import signal
import time

from servers import Rigmon, V2Gateway, http_get, wait_for

GPUS = 8


def v1_config(influx, tmp_path, extra="", interval=0.25):
    return f"""
[daemon]
interval = {interval}
state_dir = "{tmp_path / "state"}"
[influxdb]
enabled = true
api = "v1"
url = "{influx.url}"
database = "rigmon"
flush_interval = 0.2
retry_initial = "0.2s"
retry_max = "1s"
{extra}
"""


def metric(rigmon, name) -> float:
    body = http_get(rigmon.url, {"Accept": "text/plain"})[1].decode()
    match = re.search(rf"^{name} (\S+)$", body, re.M)
    return float(match.group(1)) if match else 0.0


def polls_from_log(output: str) -> int:
    return sum(int(n) for n in re.findall(r"stopped after \d+ s, (\d+) polls", output))


def gpu_points(influx, gpu="0") -> int:
    return influx.count(f"SELECT count(power_watts) FROM gpu WHERE gpu = '{gpu}'")


def test_v1_writes_and_reads_back_in_base_units(tmp_path, influx, eight_gpus):
    rigmon = Rigmon(tmp_path, eight_gpus, v1_config(influx, tmp_path))
    try:
        rigmon.wait_ready()
        rigmon.wait_polls(5)
    finally:
        assert rigmon.stop() == 0
    polls = polls_from_log(rigmon.output())
    assert polls >= 5
    assert influx.count("SELECT count(power_watts) FROM gpu") == polls * GPUS
    assert gpu_points(influx, "7") == polls
    (series,) = influx.query(
        "SELECT last(power_watts), last(sm_clock_hertz), last(memory_used_bytes), "
        "last(event_sw_power_cap), last(lost) FROM gpu WHERE gpu = '0'"
    )
    _, power, sm, memory, capped, lost = series["values"][0]
    assert (power, sm, memory, capped, lost) == (692.159, 1470e6, 1839071232, True, False)
    fields = {name: kind for name, kind in influx.query("SHOW FIELD KEYS FROM gpu")[0]["values"]}
    assert fields["memory_used_bytes"] == "integer" and fields["pcie_replays"] == "integer"
    assert fields["power_watts"] == "float" and fields["lost"] == "boolean"
    tags = {row[0] for row in influx.query("SHOW TAG KEYS FROM gpu")[0]["values"]}
    assert tags == {"host", "gpu", "uuid", "name"}
    assert influx.count("SELECT count(cpu_cores) FROM host") == polls
    assert influx.count("SELECT count(driver) FROM gpu_info") == GPUS


def test_v2_api_through_influxdb_client(tmp_path, influx, eight_gpus):
    gateway = V2Gateway(influx, token="s3cret-token", org="lab", bucket="rigmon")
    config = f"""
[daemon]
interval = 0.25
state_dir = "{tmp_path / "state"}"
[influxdb]
enabled = true
api = "v2"
url = "{gateway.url}"
org = "lab"
bucket = "rigmon"
token = "${{RIGMON_TEST_TOKEN}}"
flush_interval = 0.2
"""
    rigmon = Rigmon(tmp_path, eight_gpus, config, env={"RIGMON_TEST_TOKEN": "s3cret-token"})
    try:
        rigmon.wait_ready()
        wait_for(lambda: gateway.requests >= 2, 30, what="two writes through the gateway")
    finally:
        assert rigmon.stop() == 0
        gateway.stop()
    polls = polls_from_log(rigmon.output())
    assert gateway.requests >= 2
    assert influx.count("SELECT count(power_watts) FROM gpu") == polls * GPUS
    assert "s3cret-token" not in rigmon.output()


def test_outage_loses_nothing_and_writes_each_point_once(tmp_path, influx, eight_gpus):
    rigmon = Rigmon(tmp_path, eight_gpus, v1_config(influx, tmp_path, interval=0.2))
    try:
        rigmon.wait_ready()
        rigmon.wait_polls(5)
        influx.stop()
        wait_for(lambda: metric(rigmon, "rigmon_influxdb_spool_points") > 0, 30, what="points spooled")
        rigmon.wait_polls(10)  # two seconds of polls while the server is away
        influx.start()
        wait_for(lambda: metric(rigmon, "rigmon_influxdb_spool_points") == 0, 60, what="the spool to drain")
    finally:
        assert rigmon.stop() == 0
    polls = polls_from_log(rigmon.output())
    assert polls >= 15
    assert gpu_points(influx, "0") == polls  # every poll stored, once
    assert influx.count("SELECT count(power_watts) FROM gpu") == polls * GPUS
    assert "InfluxDB write failed" in rigmon.output() and "InfluxDB writes resume" in rigmon.output()


def test_sigkill_during_an_outage_loses_nothing(tmp_path, influx, eight_gpus):
    config = v1_config(influx, tmp_path, interval=0.2)
    (tmp_path / "a").mkdir()
    first = Rigmon(tmp_path / "a", eight_gpus, config)
    try:
        first.wait_ready()
        first.wait_polls(5)
        influx.stop()
        wait_for(lambda: metric(first, "rigmon_influxdb_spool_points") > 0, 30, what="points spooled")
        first.wait_polls(5)
        polls_before = metric(first, "rigmon_polls_total")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
    finally:
        first.stop()
    (tmp_path / "b").mkdir()
    second = Rigmon(tmp_path / "b", eight_gpus, config)  # same state_dir, so the same spool
    try:
        second.wait_ready()
        second.wait_polls(3)  # polls of its own while the server is still away
        influx.start()
        wait_for(lambda: metric(second, "rigmon_influxdb_spool_points") == 0, 60, what="the spool to drain")
    finally:
        assert second.stop() == 0
    polls_after = polls_from_log(second.output())
    stored = gpu_points(influx, "0")
    # the first run made polls_before polls when last scraped, and at most one more before the kill
    assert polls_before + polls_after <= stored <= polls_before + 1 + polls_after, (polls_before, polls_after, stored)
    assert "waiting from an earlier run" in second.output()


def test_spool_bound_drops_the_oldest_and_counts(tmp_path, influx, eight_gpus):
    config = v1_config(influx, tmp_path, interval=0.1, extra="spool_max_bytes = 65536\n")
    rigmon = Rigmon(tmp_path, eight_gpus, config)
    try:
        rigmon.wait_ready()
        rigmon.wait_polls(5)
        influx.stop()
        outage_started = time.time()
        # the 64 KB spool overflows, and the outage lasts long enough that its first seconds go
        wait_for(lambda: metric(rigmon, "rigmon_influxdb_points_dropped_total") > 0, 60, what="points dropped")
        rigmon.wait_polls(max(0, int((outage_started + 2.5 - time.time()) / 0.1)) + 5)
        influx.start()
        recovered = time.time()  # a 64 KB spool holds about 5 samples of 8 GPUs (~1.2 KB a GPU line)

        def caught_up():  # the spool drained, and a poll made since the server came back is stored
            if metric(rigmon, "rigmon_influxdb_spool_points") != 0:
                return False
            last = influx.query("SELECT last(power_watts) FROM gpu WHERE gpu = '0'", epoch="ns")
            return bool(last) and last[0]["values"][0][0] / 1e9 >= recovered

        wait_for(caught_up, 60, what="the spool to drain and a poll after the recovery to be stored")
        body = http_get(rigmon.url, {"Accept": "text/plain"})[1].decode()  # one scrape: one consistent snapshot
    finally:
        rigmon.stop()

    def value(name):
        return float(re.search(rf"^{name} (\S+)$", body, re.M).group(1))

    dropped, produced = value("rigmon_influxdb_points_dropped_total"), value("rigmon_influxdb_points_produced_total")
    written = value("rigmon_influxdb_points_written_total")
    spooled = value("rigmon_influxdb_spool_points")
    assert dropped > 0
    assert "dropped the oldest" in rigmon.output()
    assert written + dropped + spooled == produced  # every point made is accounted for
    # the oldest points of the outage went; from some point on, every poll is there, through the
    # recovery to the end (whole oldest segments are dropped, never points in between)
    ns = int(outage_started * 1e9)
    kept = influx.query(f"SELECT power_watts FROM gpu WHERE gpu = '0' AND time >= {ns}", epoch="ns")
    times = [row[0] / 1e9 for row in kept[0]["values"]]
    assert times[0] >= outage_started + 1.5, times[0] - outage_started
    assert times[-1] >= recovered
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) < 0.35, max(gaps)


def test_bad_token_is_one_clear_error_and_the_data_stays(tmp_path, influx, eight_gpus):
    gateway = V2Gateway(influx, token="right", org="lab", bucket="rigmon")
    config = f"""
[daemon]
interval = 0.2
state_dir = "{tmp_path / "state"}"
[influxdb]
enabled = true
url = "{gateway.url}"
org = "lab"
bucket = "rigmon"
token = "wrong"
flush_interval = 0.2
retry_max = "30s"
"""
    rigmon = Rigmon(tmp_path, eight_gpus, config)
    try:
        rigmon.wait_ready()
        rigmon.wait_output("InfluxDB refused the write")
        rigmon.wait_polls(15)  # three more seconds of retries: the error is not said again
        spooled = metric(rigmon, "rigmon_influxdb_spool_points")
        written = metric(rigmon, "rigmon_influxdb_points_written_total")
    finally:
        rigmon.stop()
        gateway.stop()
    errors = [line for line in rigmon.output().splitlines() if "InfluxDB refused the write" in line]
    assert len(errors) == 1, errors
    assert "HTTP 401" in errors[0] and "unauthorized access" in errors[0] and "token" in errors[0]
    assert gateway.requests <= 2  # no hot loop
    assert written == 0 and spooled > 0
    assert list((tmp_path / "state").glob("replay/*/influxdb-spool/*.lp"))  # the replay's own, for the next start
