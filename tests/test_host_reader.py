"""The host reader on recorded psutil answers, on a fake RAPL sysfs, and real psutil on a
fake hwmon tree."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import scenarios as sc

from rigmon.readers.host import HostReader, SystemHost
from rigmon.readers.replay import ReplayHost


def read_host(**host):
    rec = sc.with_host(sc.h200(), **host)
    reader = HostReader(ReplayHost(sc.source(rec)), rapl=False)
    reader.open()
    return reader.read()


def test_no_hwmon_is_a_normal_reported_state():
    reading = read_host()
    assert reading.temperatures == () and reading.fans == () and reading.cpu_temperatures == ()
    assert any("no temperature or fan sensors" in n for n in reading.notes)
    assert reading.cpu_count == 16


def test_k10temp_with_tctl_only_uses_tctl_and_says_so():
    reading = read_host(sensors_temperatures=sc.K10TEMP_TCTL_ONLY)
    (cpu,) = reading.cpu_temperatures
    assert (cpu.socket, cpu.chip, cpu.sensor, cpu.celsius) == (0, "k10temp", "Tctl", 71.25)
    assert {(t.chip, t.label) for t in reading.temperatures} == {("k10temp", "Tctl"), ("nvme", "Composite")}


def test_k10temp_prefers_tdie_over_tctl():
    (cpu,) = read_host(sensors_temperatures=sc.K10TEMP_TDIE).cpu_temperatures
    assert (cpu.sensor, cpu.celsius) == ("Tdie", 70.5)


def test_coretemp_two_packages_give_two_sockets():
    cpus = read_host(sensors_temperatures=sc.CORETEMP_TWO_PACKAGES).cpu_temperatures
    assert [(c.socket, c.sensor, c.celsius, c.critical_celsius) for c in cpus] == [
        (0, "Package id 0", 58.0, 100.0),
        (1, "Package id 1", 64.0, 100.0),
    ]


def test_fan_at_zero_rpm_is_read_and_unnamed_fans_are_numbered():
    fans = read_host(sensors_fans=sc.FAN_STOPPED).fans
    assert [(f.chip, f.label, f.rpm) for f in fans] == [
        ("nct6798", "fan1", 1150),
        ("nct6798", "fan2", 0),
        ("nct6798", "fan3", 870),
    ]


def test_load_memory_and_cpu_in_base_units():
    reading = read_host(
        cpu_percent=37.5, getloadavg=[1.5, 1.0, 0.5], virtual_memory={"total": 64 * 2**30, "available": 40 * 2**30}
    )
    assert reading.cpu_utilization_ratio == 0.375
    assert (reading.load1, reading.load15) == (1.5, 0.5)
    assert reading.memory_total_bytes == 64 * 2**30


def test_a_broken_section_leaves_the_rest(caplog):
    class Broken(ReplayHost):
        def sensors_fans(self):
            raise OSError("hwmon went away")

    reader = HostReader(Broken(sc.source(sc.with_host(sc.h200(), sensors_temperatures=sc.K10TEMP_TDIE))), rapl=False)
    reading = reader.read()
    reader.read()
    assert reading.cpu_temperatures[0].sensor == "Tdie"
    assert any("fans unreadable" in n for n in reading.notes)
    assert sum("fans unreadable" in r.message for r in caplog.records) == 1  # said once, not every poll


def _rapl_zone(root, name, index, energy, max_range):
    zone = root / "class" / "powercap" / f"intel-rapl:{index}"
    zone.mkdir(parents=True)
    (zone / "name").write_text(name + "\n")
    (zone / "energy_uj").write_text(f"{energy}\n")
    (zone / "max_energy_range_uj").write_text(f"{max_range}\n")
    sub = root / "class" / "powercap" / f"intel-rapl:{index}:0"
    sub.mkdir()
    (sub / "name").write_text("core\n")
    return zone


def test_rapl_energy_is_monotonic_across_a_wrap(tmp_path):
    zone = _rapl_zone(tmp_path, "package-0", 0, 262_000_000_000, 262_143_328_850)
    reader = HostReader(SystemHost(tmp_path))
    first = reader.read().cpu_energy
    assert [(e.zone, e.joules) for e in first] == [("package-0", 262_000.0)]
    (zone / "energy_uj").write_text("56_671_150".replace("_", ""))  # wrapped: 200 J later
    second = reader.read().cpu_energy[0]
    assert second.joules == pytest.approx(262_000 + 200, abs=1e-6)


def test_rapl_unreadable_is_a_note_not_a_failure(tmp_path):
    zone = _rapl_zone(tmp_path, "package-0", 0, 1, 10)
    (zone / "energy_uj").unlink()
    reading = HostReader(SystemHost(tmp_path)).read()
    assert reading.cpu_energy == ()
    assert any("RAPL" in n for n in reading.notes)


HWMON_SCRIPT = textwrap.dedent("""
    import json, os, subprocess, sys
    fake = sys.argv[1]
    subprocess.run(["mount", "--bind", fake, "/sys/class"], check=True)
    from rigmon.readers.host import HostReader, SystemHost
    r = HostReader(SystemHost("/nonexistent"), rapl=False).read()
    print(json.dumps({"cpu": [[c.chip, c.sensor, c.celsius] for c in r.cpu_temperatures],
                      "fans": [[f.chip, f.label, f.rpm] for f in r.fans]}))
""")


def in_mount_namespace(script: str, fake_class) -> dict:
    """Run ``script`` in a private mount namespace with ``fake_class`` over /sys/class; its JSON."""
    import json

    done = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", script, str(fake_class)], capture_output=True, text=True
    )
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_real_psutil_on_a_fake_hwmon_tree(tmp_path):
    hwmon = tmp_path / "class" / "hwmon"
    k10 = hwmon / "hwmon0"
    k10.mkdir(parents=True)
    (k10 / "name").write_text("k10temp\n")
    (k10 / "temp1_input").write_text("71250\n")
    (k10 / "temp1_label").write_text("Tctl\n")
    (k10 / "temp3_input").write_text("65000\n")
    (k10 / "temp3_label").write_text("Tccd1\n")
    fan = hwmon / "hwmon1"
    fan.mkdir()
    (fan / "name").write_text("nct6798\n")
    (fan / "fan1_input").write_text("1150\n")
    (fan / "fan2_input").write_text("0\n")
    seen = in_mount_namespace(HWMON_SCRIPT, tmp_path / "class")
    assert seen["cpu"] == [["k10temp", "Tccd1", 65.0]]
    assert seen["fans"] == [["nct6798", "fan1", 1150.0], ["nct6798", "fan2", 0.0]]


HWMON_DEVICES_SCRIPT = textwrap.dedent("""
    import json, subprocess, sys
    subprocess.run(["mount", "--bind", sys.argv[1], "/sys/class"], check=True)
    from rigmon.readers.host import HostReader, SystemHost
    r = HostReader(SystemHost("/sys"), rapl=False).read()
    print(json.dumps({"temps": [[t.chip, t.device, t.label, t.celsius] for t in r.temperatures],
                      "fans": [[f.chip, f.device, f.label, f.rpm] for f in r.fans],
                      "controls": [list(c) for c in r.fan_controls], "powers": [list(p) for p in r.powers],
                      "currents": [list(c) for c in r.currents], "voltages": [list(v) for v in r.voltages]}))
""")


def _chip(hwmon, n: int, name: str, device, files: dict) -> None:
    d = hwmon / f"hwmon{n}"
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    device.mkdir(parents=True)
    (d / "device").symlink_to(device)
    for file, text in files.items():
        (d / file).write_text(f"{text}\n")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_chips_of_one_name_stay_apart_and_sysfs_adds_what_psutil_lacks(tmp_path):
    """Two coretemp packages, two NVMe drives, a Corsair PSU and a Nuvoton fan controller with a
    stopped fan in alarm, read by the real psutil and rigmon's sysfs walk over a fake hwmon
    tree mounted over /sys/class in a private mount namespace."""
    hwmon, devices = tmp_path / "class" / "hwmon", tmp_path / "devices"
    _chip(
        hwmon,
        0,
        "nvme",
        devices / "pci0000:00" / "0000:00:1d.0" / "nvme" / "nvme0",
        {"temp1_input": 41850, "temp1_label": "Composite"},
    )
    _chip(
        hwmon,
        1,
        "coretemp",
        devices / "platform" / "coretemp.0",
        {"temp1_input": 58000, "temp1_label": "Package id 0", "temp2_input": 55000, "temp2_label": "Core 0"},
    )
    _chip(
        hwmon,
        2,
        "coretemp",
        devices / "platform" / "coretemp.1",
        {"temp1_input": 64000, "temp1_label": "Package id 1", "temp2_input": 61000, "temp2_label": "Core 0"},
    )
    _chip(
        hwmon,
        3,
        "nvme",
        devices / "pci0000:40" / "0000:41:00.0" / "nvme" / "nvme1",
        {"temp1_input": 52850, "temp1_label": "Composite"},
    )
    _chip(
        hwmon,
        4,
        "nct6798",
        devices / "platform" / "nct6775.656",
        {
            "fan1_input": 1150,
            "fan2_input": 0,
            "fan2_min": 300,
            "fan2_alarm": 1,
            "fan1_alarm": 0,
            "pwm1": 128,
            "pwm1_enable": 5,
            "pwm2": 255,
            "pwm2_enable": 1,
            "in0_input": 1056,
            "in0_label": "Vcore",
        },
    )
    _chip(
        hwmon,
        5,
        "corsair-psu",
        devices / "usb1" / "1-4" / "0003:1B1C:1C05.0001",
        {
            "power1_input": 412000000,
            "power1_label": "power total",
            "curr1_input": 34500,
            "curr1_label": "curr +12v",
            "in0_input": 12040,
            "in0_label": "v_out +12v",
            "temp1_input": 36250,
            "temp1_label": "vrm temp",
        },
    )
    seen = in_mount_namespace(HWMON_DEVICES_SCRIPT, tmp_path / "class")
    temps = {(chip, device, label): c for chip, device, label, c in seen["temps"]}
    assert temps[("coretemp", "coretemp.0", "Core 0")] == 55.0 and temps[("coretemp", "coretemp.1", "Core 0")] == 61.0
    assert temps[("nvme", "nvme0", "Composite")] == 41.85 and temps[("nvme", "nvme1", "Composite")] == 52.85
    assert temps[("corsair-psu", "0003:1B1C:1C05.0001", "vrm temp")] == 36.25
    assert len(seen["temps"]) == 7  # none dropped: psutil's one "coretemp" and one "nvme" are two each
    assert seen["fans"] == [["nct6798", "nct6775.656", "fan1", 1150.0], ["nct6798", "nct6775.656", "fan2", 0.0]]
    assert ["nct6798", "nct6775.656", "fan2", 1.0, 1, 300.0, True] in seen["controls"]
    assert ["nct6798", "nct6775.656", "fan1", 128 / 255, 5, None, False] in seen["controls"]
    assert seen["powers"] == [["corsair-psu", "0003:1B1C:1C05.0001", "power total", 412.0, None]]
    assert seen["currents"] == [["corsair-psu", "0003:1B1C:1C05.0001", "curr +12v", 34.5, None]]
    assert ["nct6798", "nct6775.656", "Vcore", 1.056, None] in seen["voltages"]
    assert ["corsair-psu", "0003:1B1C:1C05.0001", "v_out +12v", 12.04, None] in seen["voltages"]


def test_a_psu_that_reports_its_power_feeds_its_budget():
    """A budget group measured by the Corsair PSU's own power input: 412 W against 450."""
    from rigmon.config.schema import parse
    from rigmon.offline import replay_rules

    rec = sc.rich(sc.h200(), gpus=8)
    for sensor, fires in (
        ("corsair-psu/power total", True),
        ("corsair-psu/0003:1B1C:1C05.0001/power total", True),
        ("corsair-psu/no such input", False),
    ):
        config = parse(
            {"alerts": {"power_budget": {"groups": [{"name": "psu-a", "watts": 450, "sensor": sensor, "gpus": [0]}]}}}
        )
        fired = [t for t in replay_rules(rec, config) if t.alertname == "PowerBudgetHigh" and t.status == "firing"]
        if fires:
            assert fired and "psu-a: 412 W of a 450 W budget" in fired[0].summary, sensor
        else:  # the input is not there: the GPU's own draw (692 W of 450) stands in
            assert not fired and any(t.alertname == "PowerBudgetExceeded" for t in replay_rules(rec, config))


def odd_layouts(tmp_path):
    """A /sys/class/hwmon as real boards lay it out, with each device a directory of its own
    behind the chip's ``device`` link: a Nuvoton whose only fan is fan2 (on pwm2, with its
    minimum and alarm); an applesmc whose attributes are all under its device/; two coretemp
    sockets as older kernels label them (Physical id N); a chip with no name file."""
    hwmon, devices = tmp_path / "class" / "hwmon", tmp_path / "devices"
    _chip(
        hwmon,
        0,
        "nct6798",
        devices / "platform" / "nct6775.656",
        {"fan2_input": 1098, "fan2_min": 300, "fan2_alarm": 0, "pwm2": 153, "pwm2_enable": 5, "in0_input": 1056},
    )
    smc = hwmon / "hwmon1"
    smc.mkdir(parents=True)
    below = devices / "platform" / "applesmc.768"
    below.mkdir(parents=True)
    (smc / "device").symlink_to(below)
    for file, text in {
        "name": "applesmc",
        "fan1_input": 1998,
        "fan1_label": "Exhaust",
        "temp1_input": 45000,
        "temp1_label": "TC0P",
    }.items():
        (below / file).write_text(f"{text}\n")
    for n in (0, 1):
        _chip(
            hwmon,
            2 + n,
            "coretemp",
            devices / "platform" / f"coretemp.{n}",
            {
                "temp1_input": 60000 + 4000 * n,
                "temp1_label": f"Physical id {n}",
                "temp1_crit": 100000,
                "temp2_input": 58000 + 4000 * n,
                "temp2_label": "Core 0",
                "temp2_crit": 100000,
            },
        )
    nameless = hwmon / "hwmon4"
    nameless.mkdir()
    (devices / "virtual" / "thermal0").mkdir(parents=True)
    (nameless / "device").symlink_to(devices / "virtual" / "thermal0")
    (nameless / "temp1_input").write_text("47000\n")
    return tmp_path / "class"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_each_sensor_is_named_as_sysfs_names_it(tmp_path):
    """The real psutil and rigmon over odd_layouts, through status --json: fan2 is fan2 (psutil
    lists it as the chip's one unnamed fan), with its own PWM and minimum; applesmc's fan (which
    psutil never lists: another chip has fans of its own) and temperature are found under its
    device/; each socket is its own CPU; the nameless chip keeps its temperature under its
    directory's name."""
    script = textwrap.dedent("""
        import subprocess, sys
        subprocess.run(["mount", "--bind", sys.argv[1], "/sys/class"], check=True)
        sys.exit(subprocess.run([sys.executable, "-m", "rigmon", "status", "--json"]).returncode)
    """)
    import json

    done = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", script, str(odd_layouts(tmp_path))], capture_output=True, text=True
    )
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr
    host = json.loads(done.stdout)["host"]
    fans = {(f["chip"], f["label"]): f for f in host["fans"]}
    assert set(fans) == {("nct6798", "fan2"), ("applesmc", "Exhaust")}, host["fans"]
    assert fans[("nct6798", "fan2")]["rpm"] == 1098 and fans[("nct6798", "fan2")]["duty"] == pytest.approx(0.6)
    assert fans[("applesmc", "Exhaust")]["rpm"] == 1998 and fans[("applesmc", "Exhaust")]["device"] == "applesmc.768"
    controls = {(c["chip"], c["fan"]): c for c in host["fan_controls"]}
    assert (controls[("nct6798", "fan2")]["min_rpm"], controls[("nct6798", "fan2")]["alarm"]) == (300.0, False)
    cpus = {(c["socket"], c["sensor"], c["celsius"], c["limit_celsius"]) for c in host["cpu_temperatures"]}
    assert cpus == {(0, "Physical id 0", 60.0, 100.0), (1, "Physical id 1", 64.0, 100.0)}
    temps = {(t["chip"], t["device"], t["label"]): t["celsius"] for t in host["temperatures"]}
    assert temps[("applesmc", "applesmc.768", "TC0P")] == 45.0
    assert temps[("hwmon4", "thermal0", "temp1")] == 47.0
    assert temps[("coretemp", "coretemp.0", "Core 0")] == 58.0 and temps[("coretemp", "coretemp.1", "Core 0")] == 62.0


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_a_socket_that_vanishes_mid_run_is_a_missing_sensor(tmp_path):
    """The daemon over odd_layouts (in a mount namespace of its own): /metrics and the page's
    state name each sensor as sysfs does; socket 1's coretemp goes (its driver unloaded, the
    socket gone): SensorMissing for its sensors, by their device; socket 0's stay."""
    from servers import Rigmon, http_get, wait_for

    fake = odd_layouts(tmp_path)
    config = tmp_path / "rigmon.toml"
    config.write_text(
        f'[daemon]\nstate_dir = "{tmp_path / "state"}"\ninterval = 0.5\n[gpu]\nenabled = false\n'
        '[alerts.builtin.SensorMissing]\nfor = "1s"\n'
    )
    daemon = Rigmon.__new__(Rigmon)  # the daemon, started inside a namespace with the fake tree over /sys/class
    from servers import free_port

    daemon.port, daemon.config = free_port(), config
    daemon.log = open(tmp_path / "rigmon.log", "w+")
    script = (
        "import os, subprocess, sys\n"
        "subprocess.run(['mount', '--bind', sys.argv[1], '/sys/class'], check=True)\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'rigmon', *sys.argv[2:]])\n"
    )
    daemon.proc = subprocess.Popen(
        [
            "unshare",
            "-m",
            sys.executable,
            "-c",
            script,
            str(fake),
            "run",
            "--config",
            str(config),
            "--listen",
            "127.0.0.1",
            "--port",
            str(daemon.port),
        ],
        stdout=daemon.log,
        stderr=subprocess.STDOUT,
    )
    try:
        daemon.wait_ready()
        daemon.wait_polls(3)
        body = http_get(daemon.url)[1].decode()
        assert 'rigmon_fan_speed_rpm{chip="nct6798",device="nct6775.656",fan="fan2"} 1098.0' in body
        assert 'rigmon_fan_speed_rpm{chip="applesmc",device="applesmc.768",fan="Exhaust"} 1998.0' in body
        assert 'rigmon_sensor_temperature_celsius{chip="hwmon4",device="thermal0",sensor="temp1"} 47.0' in body
        state = json.loads(http_get(daemon.url.replace("/metrics", "/api/state"))[1])
        assert {(c["socket"], c["sensor"]) for c in state["sensors"]["cpu_temperatures"]} == {
            (0, "coretemp/Physical id 0"),
            (1, "coretemp/Physical id 1"),
        }
        assert {f["name"] for f in state["sensors"]["fans"]} == {"nct6798/fan2", "applesmc/Exhaust"}
        import shutil as sh

        sh.rmtree(fake / "hwmon" / "hwmon3")  # socket 1's coretemp

        def missing():
            text = http_get(daemon.url)[1].decode()
            return sorted(
                line.split('sensor="')[1].split('"')[0]
                for line in text.splitlines()
                if line.startswith("rigmon_alert_active{") and 'alertname="SensorMissing"' in line
            )

        wait_for(lambda: missing(), 20, what="SensorMissing")
        assert missing() == ["coretemp/coretemp.1/Core 0", "coretemp/coretemp.1/Physical id 1"]
    finally:
        assert daemon.stop() == 0
