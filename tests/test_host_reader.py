"""The host reader on recorded psutil answers, on a fake RAPL sysfs, and real psutil on a
fake hwmon tree."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import scenarios as sc

from rigmon.readers.host import HostReader, SystemHost
from rigmon.replay import ReplayHost


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
        (0, "Package id 0", 58.0, 100.0), (1, "Package id 1", 64.0, 100.0)]


def test_fan_at_zero_rpm_is_read_and_unnamed_fans_are_numbered():
    fans = read_host(sensors_fans=sc.FAN_STOPPED).fans
    assert [(f.chip, f.label, f.rpm) for f in fans] == [("nct6798", "fan1", 1150), ("nct6798", "fan2", 0),
                                                        ("nct6798", "fan3", 870)]


def test_load_memory_and_cpu_in_base_units():
    reading = read_host(cpu_percent=37.5, getloadavg=[1.5, 1.0, 0.5],
                        virtual_memory={"total": 64 * 2**30, "available": 40 * 2**30})
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
    done = subprocess.run(["unshare", "-m", sys.executable, "-c", HWMON_SCRIPT, str(tmp_path / "class")],
                          capture_output=True, text=True)
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr
    import json

    seen = json.loads(done.stdout)
    assert seen["cpu"] == [["k10temp", "Tccd1", 65.0]]
    assert seen["fans"] == [["nct6798", "fan1", 1150.0], ["nct6798", "fan2", 0.0]]
