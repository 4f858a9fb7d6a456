"""``rigmon burnin`` on the CPU: a passing run with a complete report, and injected faults
(from replayed hardware, a stalled fan, a corrupted determinism result) that fail it."""

import json
import os
import subprocess
import sys
import time

import pytest
import scenarios as sc
from scenarios import set_gpu, timeline

pytest.importorskip("torch")


def burnin(tmp_path, *args, env=None, timeout=600):
    report = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "rigmon", "burnin", "--report", str(report), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    data = json.loads((report / "burnin.json").read_text()) if (report / "burnin.json").exists() else None
    return done, data, report


def test_cpu_burnin_passes_with_a_complete_report(tmp_path):
    done, data, report = burnin(tmp_path, "--minutes", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert data["verdict"] == "pass" and "PASS" in done.stdout
    (unit,) = data["units"]
    assert unit["status"] == "pass" and unit["device"] == "cpu" and unit["model"] == "tiny"
    assert unit["gpu_name"] and unit["gpu_name"] != "cpu"  # the CPU's own name, never an empty one
    assert unit["final_loss"] - unit["floor"] < 0.1  # the loss approached the data's floor
    assert unit["tokens"] > 0 and unit["tokens_per_s"] > 0
    assert len(unit["progress"]["tokens_per_s"]) >= 30 and unit["probes"] >= 2 and not unit["failed_probes"]
    assert data["hardware"]["ticks"] >= 60
    assert "no GPU here (NVML found none)" in data["notes"][0]
    assert "note: no GPU here" in done.stdout  # every note reaches the terminal
    if data["energy"]["total_kwh"] is None:  # no RAPL here: said, not a zero
        assert "energy not measured" in done.stdout
    assert "(floor " in done.stdout  # the progress line shows the loss against its floor
    assert (report / "summary.json").exists()
    page = (report / "burnin.html").read_text()
    assert (
        page.count("<svg") >= 4
        and "loss above the data&#x27;s floor" in page
        and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )
    render_in_chromium(report / "burnin.html", tmp_path / "burnin.png")


def render_in_chromium(page, png):
    """The report as a person sees it: headless Chromium's screenshot of the self-contained page."""
    import shutil

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={png.parent / 'chromium'}",
            "--hide-scrollbars",
            "--window-size=1560,1500",
            f"--screenshot={png}",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    assert png.exists() and png.stat().st_size > 30_000  # charts, not a blank page


def replayed(tmp_path, recording, name):
    return str(sc.write(recording, tmp_path / f"{name}.rec.jsonl"))


def gpu_unit(data):
    return next(u for u in data["units"] if u["name"] == "GPU0")


def test_xid_from_replayed_hardware_fails(tmp_path):
    path = replayed(tmp_path, sc.with_xid(sc.h200(), at_second=5, xid=79), "xid")
    done, data, _ = burnin(tmp_path, "--minutes", "0.5", "--replay", path, "--cpu")
    assert done.returncode == 1, done.stdout + done.stderr
    assert any(r.startswith("XID 79 at") and "fallen off the bus" in r for r in gpu_unit(data)["reasons"])


def test_thermal_slowdown_from_replayed_hardware_fails(tmp_path):
    hot = timeline(
        60,
        1,
        modify=lambda t, tick: set_gpu(
            tick,
            nvmlDeviceGetCurrentClocksEventReasons=0x20 | 0x4,
            nvmlDeviceGetTemperature__0=86,
            nvmlDeviceGetUtilizationRates={"gpu": 100, "memory": 9},
        ),
    )
    done, data, _ = burnin(tmp_path, "--minutes", "0.5", "--replay", replayed(tmp_path, hot, "hot"), "--cpu")
    assert done.returncode == 1
    assert any("sw thermal slowdown active 100 % of the time" in r for r in gpu_unit(data)["reasons"])


def test_an_energy_counter_that_stands_still_is_integrated_from_power_and_said(tmp_path):
    """GPU 0 draws 692 W while its energy counter never moves: the report's energy is its power
    over the run, and a note says so (not a 0 kWh that looks measured)."""

    def stuck(t, tick):
        set_gpu(tick, nvmlDeviceGetPowerUsage=692_000 + 150 * (int(t) % 3), nvmlDeviceGetTotalEnergyConsumption=5_000)

    path = replayed(tmp_path, timeline(120, 1, modify=stuck), "stuck")
    done, data, _ = burnin(tmp_path, "--minutes", "0.75", "--replay", path, "--cpu")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    unit = gpu_unit(data)
    assert unit["energy_from_power"] is True
    watched = data["hardware"]["ticks"] - 1
    assert 0.8 * 692 * watched <= unit["energy_kwh"] * 3.6e6 <= 1.1 * 692 * watched, (unit["energy_kwh"], watched)
    assert "energy of GPU(s) 0 integrated from their power" in done.stdout


def test_stalled_cpu_fan_fails(tmp_path):
    def fan(t, tick):
        tick["host"] = {"sensors_fans": {"nct6798": [["", 1150 if t < 3 else 0]]}}

    done, data, _ = burnin(
        tmp_path, "--minutes", "0.75", "--cpu", "--replay", replayed(tmp_path, timeline(120, 1, modify=fan), "fan")
    )
    assert done.returncode == 1, done.stdout
    assert data["host_verdict"]["status"] == "fail"
    assert any(r.startswith("FanStalled: Fan nct6798/fan1 stopped") for r in data["host_verdict"]["reasons"])


def test_corrupted_determinism_result_fails(tmp_path):
    done, data, _ = burnin(tmp_path, "--minutes", "0.5", env={"RIGMON_BURNIN_INJECT": "determinism"})
    assert done.returncode == 1
    assert any(r.startswith("determinism probe mismatch") for r in data["units"][0]["reasons"])
    assert data["units"][0]["failed_probes"]


def test_nan_loss_fails(tmp_path):
    done, data, _ = burnin(tmp_path, "--minutes", "0.25", env={"RIGMON_BURNIN_INJECT": "nan"})
    assert done.returncode == 1
    assert "the loss became NaN or infinite" in data["units"][0]["reasons"]


def test_without_torch_says_how_to_install_and_exits_2(tmp_path):
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from rigmon.commands import main\n"
        "raise SystemExit(main(['burnin', '--minutes', '1', '--report', sys.argv[1]]))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r")], capture_output=True, text=True)
    # this environment's own pip, and PyTorch's CPU build where no NVIDIA driver is loaded (this machine)
    assert done.returncode == 2 and f"{sys.executable} -m pip install torch" in done.stderr
    assert "--index-url https://download.pytorch.org/whl/cpu" in done.stderr


def test_refuses_to_start_beside_a_training_run_unless_forced(tmp_path):
    """A scheduled burn-in must never land on a training run: a compute process on a chosen GPU
    (here a real process, named by PID in the replayed NVML answers) stops it with exit 2."""
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # train_gpt.py --epochs 9"])
    try:
        busy = timeline(
            60,
            1,
            modify=lambda t, tick: set_gpu(
                tick, nvmlDeviceGetComputeRunningProcesses=[{"pid": job.pid, "usedGpuMemory": 20 << 30}]
            ),
        )
        path = replayed(tmp_path, busy, "busy")
        done, data, report = burnin(tmp_path, "--minutes", "0.25", "--replay", path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "not starting: GPU 0 (NVIDIA H200) runs PID" in done.stderr and f"PID {job.pid} (" in done.stderr
        assert "train_gpt.py --epochs 9" in done.stderr and "--force" in done.stderr
        assert "Traceback" not in done.stderr and not report.exists()  # refused before anything was written
        other = burnin(tmp_path, "--minutes", "0.25", "--replay", path, "--gpus", "1")[0]
        assert "not starting" not in other.stderr  # GPU 1 is not busy (and not there: another matter)
        forced, data, _ = burnin(tmp_path, "--minutes", "0.25", "--replay", path, "--force", "--cpu")
        assert "not starting" not in forced.stderr and data is not None, forced.stderr
    finally:
        job.kill()
        job.wait()


def test_bad_gpu_list_is_a_usage_error(tmp_path):
    done, _, report = burnin(tmp_path, "--minutes", "1", "--gpus", "zero")
    assert done.returncode == 2 and "--gpus: expected 'all' or indices like 0,1" in done.stderr
    assert "Traceback" not in done.stderr and not report.exists()


# --- never a PASS for what was not tested; clear errors for bad arguments --------------------------
def test_gpus_that_pytorch_cannot_use_could_not_run(tmp_path):
    """NVML sees an H200 (replayed) but this torch is a CPU build: exit 2, the reason on the terminal."""
    done, data, report = burnin(tmp_path, "--minutes", "0.25", "--replay", str(sc.H200))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "could not run: NVML sees 1 GPU(s) but PyTorch cannot use CUDA" in done.stderr and "--cpu" in done.stderr
    assert data is None and "Traceback" not in done.stderr and "PASS" not in done.stdout


def test_a_host_without_sensors_is_not_tested(tmp_path):
    """This machine shows no CPU temperature or fan: the host's cooling is "not tested", never "pass"."""
    done, data, _ = burnin(tmp_path, "--minutes", "0.25", "--cpu")
    assert data["host_verdict"]["status"] == "not tested", data["host_verdict"]
    assert "no CPU temperature or fan sensor visible" in data["host_verdict"]["reasons"][0]
    assert "its cooling where a sensor shows it" in " ".join(data["notes"]) and "host – no CPU" in done.stdout


def test_cpu_flag_trains_on_the_cpu_and_only_watches_the_gpus(tmp_path):
    done, data, _ = burnin(tmp_path, "--minutes", "0.75", "--replay", str(sc.H200), "--cpu")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "note: trained on the CPU (--cpu)" in done.stdout and "GPU 0 only watched" in done.stdout
    assert gpu_unit(data)["status"] == "not tested" and data["verdict"] == "pass"
    assert "GPU0 NVIDIA H200: not tested" in done.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpus", "9"], "could not run: --gpus 9: there is no GPU 9"),
        (["--report", "FILE/sub"], "--report"),
        (["--baseline", "/nonexistent/old.json"], "--baseline /nonexistent/old.json: cannot read it"),
        (["--baseline", "BAD"], "not JSON"),
        (["--hours", "nan"], "--hours"),
        (["--minutes", "0"], "--minutes"),
        (["--hours", "-1"], "--hours"),
    ],
)
def test_bad_arguments_are_one_clear_line_and_exit_2(args, message, tmp_path):
    (tmp_path / "FILE").write_text("a file where a directory should be")
    (tmp_path / "BAD").write_text("{not json")
    args = [str(tmp_path / a) if a in ("FILE/sub", "BAD") else a for a in args]
    if "--hours" not in args and "--minutes" not in args:
        args = ["--minutes", "0.25", *args]
    command = [sys.executable, "-m", "rigmon", "burnin", *args]
    if "--report" not in args:
        command += ["--report", str(tmp_path / "report")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr and "PASS" not in done.stdout, done.stderr


# --- a mixed box judged fairly ---------------------------------------------------------------------
def unit(name, gpu, gpu_name, model, rate):
    start = {"event": "start", "gpu_name": gpu_name, "model": model, "floor": 1.0}
    end = {"event": "end", "final_loss": 1.02, "floor": 1.0}
    return {
        "name": name,
        "gpu": gpu,
        "device": f"cuda:{gpu}",
        "start": start,
        "end": end,
        "probes": 3,
        "failed_probes": [],
        "rates": [(t, rate) for t in range(0, 600, 20)],
        "exit_code": 0,
    }


def test_a_4090_beside_a_3060_passes_and_a_slow_gpu_of_one_model_fails():
    from rigmon.burnin.verdict import judge

    mixed = [
        unit("GPU0", 0, "NVIDIA GeForce RTX 4090", "gpt2", 180_000),
        unit("GPU1", 1, "NVIDIA GeForce RTX 3060", "small", 60_000),
    ]
    overall, judgements, _ = judge(mixed, {}, [])
    assert overall == "pass" and [j.status for j in judgements] == ["pass", "pass"]
    same = [unit(f"GPU{i}", i, "NVIDIA GeForce RTX 3090", "gpt2", 100_000) for i in range(3)]
    same.append(unit("GPU3", 3, "NVIDIA GeForce RTX 3090", "gpt2", 85_000))  # 15 % slow
    overall, judgements, _ = judge(same, {}, [])
    assert overall == "fail" and [j.status for j in judgements] == ["pass", "pass", "pass", "fail"]
    assert "15 % below the best NVIDIA GeForce RTX 3090's 100,000 on the same model" in judgements[3].reasons[0]


# --- data-parallel on the CPU: a real torch.distributed run over gloo --------------------------
def test_ddp_on_two_cpu_ranks_passes(tmp_path):
    done, data, _ = burnin(tmp_path, "--minutes", "0.5", "--cpu", "--ddp")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [u["name"] for u in data["units"]] == ["cpu0", "cpu1"]
    assert all(u["status"] == "pass" and u["tokens"] > 0 for u in data["units"])


def test_ddp_ranks_whose_clocks_differ_stop_on_the_same_step(tmp_path):
    """Rank 1 starts its clock 2 s after rank 0, so their times run out 2 s apart: the ranks
    agree to stop on the same step, and neither is left in a gradient all-reduce with a closed
    peer (gloo's "Connection closed by peer", a failed run of a healthy box)."""
    done, data, _ = burnin(tmp_path, "--minutes", "0.5", "--cpu", "--ddp", env={"RIGMON_BURNIN_INJECT": "late:1"})
    assert done.returncode == 0, done.stdout + done.stderr
    rank0, rank1 = data["units"]
    assert rank0["status"] == rank1["status"] == "pass" and rank0["tokens"] == rank1["tokens"] > 0


def test_ddp_rank_that_dies_fails_the_run_with_reasons(tmp_path):
    done, data, _ = burnin(tmp_path, "--minutes", "0.5", "--cpu", "--ddp", env={"RIGMON_BURNIN_INJECT": "die:1"})
    assert done.returncode == 1, done.stdout + done.stderr
    rank0, rank1 = data["units"]
    assert rank1["status"] == "fail" and "the training process died (exit code 3)" in rank1["reasons"][0]
    assert rank0["status"] == "fail" and "stopped: rank 1 (cpu1) died" in rank0["reasons"][0]


# --- bounded memory, no spike lost ----------------------------------------------------------------
def test_downsampling_keeps_every_spike_and_stays_bounded():
    from rigmon.burnin.timeline import MAX_BUCKETS, Downsampled

    s = Downsampled()
    for t in range(0, 24 * 3600, 1):
        s.add(float(t), 500.0 + (200.0 if t in (4321, 50_000, 80_000) else 0.0))
    points = s.points()
    assert len(points) <= MAX_BUCKETS + 601
    spikes = [p for p in points if p[3] == 700.0]
    assert len(spikes) == 3 and all(p[1] == 500.0 for p in points)


# --- an 8-GPU report as a person sees it -----------------------------------------------------------
LEGEND_PROBE = """<script>
document.body.dataset.probe = JSON.stringify([...document.querySelectorAll('svg.chart')].map(svg => ({
  title: svg.querySelector('.title').textContent,
  legend: [...svg.querySelectorAll('.legend')].map(t => [t.textContent, getComputedStyle(t).fill]),
  series: [...svg.querySelectorAll('polyline')].map(l => l.getAttribute('stroke')),
  peaks: [...svg.querySelectorAll('.peak')].map(t => [t.textContent, getComputedStyle(t).fill]),
  drawn: svg.getBoundingClientRect().width, card: svg.parentElement.getBoundingClientRect().width /
    Math.max(1, getComputedStyle(svg.parentElement).gridTemplateColumns.split(' ').length)})));
</script>"""


def test_eight_gpu_report_in_chromium(tmp_path):
    """``rigmon burnin --replay FILE --cpu`` makes the GPU-side report of a recorded 8-GPU box without a
    GPU; read in a real Chromium: each legend label in its line's colour (one per GPU, none grey), the
    failing GPU's peak marked and labelled with its limit, charts as wide as their cards."""
    import html
    import math
    import re
    import shutil

    def spike(t, tick):  # GPU 5 touches 95 °C for 3 s: the reading that fails the run
        tick["gpus"][5]["nvmlDeviceGetTemperature:0"] = 95 if 8 <= t < 11 else 62

    rec = sc.with_xid(timeline(40, 1, gpus=8, modify=spike), at_second=3, xid=79, gpu=2)
    done, data, report = burnin(tmp_path, "--minutes", "0.4", "--cpu", "--replay", replayed(tmp_path, rec, "eight"))
    assert done.returncode == 1, done.stdout + done.stderr  # the XID on GPU 2 and the heat on GPU 5 fail it
    units = {u["name"]: u for u in data["units"]}
    assert any("95 °C" in r for r in units["GPU5"]["reasons"]), units["GPU5"]
    page = report / "burnin.html"
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", LEGEND_PROBE + "</body>"))
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "tests/run installs Debian's chromium"
    common = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-sync",
        "--disable-background-networking",
        "--disable-component-update",
        f"--user-data-dir={tmp_path / 'c'}",
        "--window-size=1560,2400",
    ]
    dom = subprocess.run(common + ["--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert re.search(r'id="verdict"[^>]*>FAIL<', dom)
    assert re.search(r"model auto: tiny \(0\.\d+ M parameters\)", dom), "the model and its size in the header"
    for i in range(8):
        assert re.search(rf"<td[^>]*>GPU{i}</td><td[^>]*>NVIDIA H200</td>", dom)
    alerts = dom[dom.index('id="alerts"') :]
    assert "GpuXid" in alerts[: alerts.index("</table>")] and "XID 79" in alerts[: alerts.index("</table>")]
    assert "NVIDIA H200 × 8" in dom  # one section for the group, one chart per reading
    charts = {c["title"]: c for c in json.loads(html.unescape(re.search(r'data-probe="([^"]*)"', dom).group(1)))}

    def rgb(hex_colour):
        return "rgb({}, {}, {})".format(*(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)))

    temperature = charts["GPU temperature against the slowdown threshold"]
    assert [name for name, _ in temperature["legend"]] == [f"GPU{i}" for i in range(8)]
    colours = [colour for _, colour in temperature["legend"]]
    assert len(set(colours)) == 8 and "rgb(85, 85, 85)" not in colours, colours  # not the ticks' grey
    assert colours == [rgb(c) for c in temperature["series"]], "each label in its own line's colour"
    ((peak, colour),) = temperature["peaks"]
    assert peak.startswith("GPU5 peak 95 °C ≥ slowdown") and colour == colours[5], temperature["peaks"]
    for title, c in charts.items():
        assert c["drawn"] >= 0.95 * c["card"] - 2, (title, c["drawn"], c["card"])  # the chart fills its card
    loss = next(c for t, c in charts.items() if t.startswith("loss above the data's floor"))
    assert loss["legend"] and all(colour != "rgb(85, 85, 85)" for _, colour in loss["legend"])
    ticked = 0
    for svg in re.findall(r"<svg.*?</svg>", dom, re.S):  # axis labels lie on round values
        ticks = [float(x.replace("k", "e3").replace("M", "e6")) for x in re.findall(r'ytick">([^<]+)<', svg)]
        if len(ticks) < 2:
            continue
        ticked += 1
        if "log scale" in svg:
            mantissas = [t / 10 ** math.floor(math.log10(t)) for t in ticks]
            assert all(any(abs(m - r) < 1e-9 for r in (1, 2, 5)) for m in mantissas), ticks
            continue
        step = ticks[1] - ticks[0]
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert any(abs(mantissa - m) < 1e-9 for m in (1, 2, 2.5, 5)), (step, ticks)
        assert all(abs(t / step - round(t / step)) < 1e-6 for t in ticks), ticks
    assert ticked >= 5  # temperature, power, SM clock, throughput, loss (memory temperature: not measured)
    # at 1600 px and on a 400 px phone: nothing wider than the screen, no word broken across lines
    from browser import Chromium, broken_words

    chromium = Chromium(tmp_path / "chromium")
    try:
        for width in (1600, 400):
            chromium.open(page.as_uri(), width)
            loaded = "document.readyState === 'complete' && !!document.getElementById('verdict')"
            deadline = time.monotonic() + 30
            while not chromium.js(loaded) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert chromium.js("document.documentElement.clientWidth") <= width  # laid out for the screen, not zoomed
            wide = chromium.js(
                "[...document.body.querySelectorAll('*')].filter(e => e.getBoundingClientRect().right >"
                " document.documentElement.clientWidth + 1).map(e => e.tagName + '.' + e.className).slice(0, 5)"
            )
            sideways = chromium.js("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert sideways <= 0 and not wide, f"{sideways} px sideways at {width} px: {wide}"
            broken = chromium.js(broken_words("body"))
            assert broken == [], f"words broken at {width} px: {broken}"
            chromium.screenshot(tmp_path / f"burnin-{width}.png")
    finally:
        chromium.close()


@pytest.mark.parametrize("signame, code", [("SIGINT", 130), ("SIGHUP", 129)])
def test_an_interrupted_run_says_so_and_claims_no_verdict(tmp_path, signame, code):
    """Ctrl-C, or the SSH session that started it dropping (SIGHUP): the workers are stopped, the
    report is written, the run is "interrupted" (exit 128 + the signal, as a shell says), and the
    daemon exports that, not a failed box."""
    import signal

    from rigmon.exporters.burnin import BurninReports

    report = tmp_path / "reports" / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rigmon", "burnin", "--report", str(report), "--minutes", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:  # until a progress line gives a rate: it is training, not starting
        if "tok/s" in line:
            break
    proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    data = json.loads((report / "burnin.json").read_text())
    assert data["verdict"] == "interrupted" and any(f"interrupted by {signame}" in n for n in data["notes"])
    assert all(u["status"] in ("interrupted", "pass", "warn", "not tested") for u in data["units"]), data["units"]
    # the loss progress printed is the report's too: the last one reported, and when
    trained = next(u for u in data["units"] if not u["watch_only"])
    assert trained["final_loss"] is None and trained["last_loss"] > 0 and trained["last_loss_at"] > 0, trained
    html = (report / "burnin.html").read_text()
    assert f"{trained['last_loss']:.3f} / {trained['floor']:.3f} (the last reported, at" in html
    assert "Traceback" not in err
    families = {f.name: f for f in BurninReports(tmp_path / "reports").collect()}
    assert [s.labels["verdict"] for s in families["rigmon_burnin_last_verdict"].samples] == ["interrupted"]
    assert families["rigmon_burnin_last_passed"].samples == []  # no claim about the hardware


def test_a_cpu_run_whose_throughput_collapses_fails_and_a_noisy_one_passes():
    """On the CPU, which shares its cores with the box, throughput moves: a run whose rate jumps
    between 18k and 30k tokens/s passes; one that falls from 30k to 5k (a CPU throttling as it
    heats) fails, saying by how much."""
    from rigmon.burnin.verdict import judge

    def cpu_unit(rates):
        u = unit("CPU", None, None, "tiny", 0)
        return {**u, "device": "cpu", "rates": [(20 * n, r) for n, r in enumerate(rates)]}

    noisy = [30_000 if n % 3 else 18_000 for n in range(30)]
    overall, (j,), _ = judge([cpu_unit(noisy)], {}, [])
    assert overall == "pass" and j.status == "pass", j
    collapsing = [30_000] * 10 + [15_000] * 10 + [5_000] * 10
    overall, (j,), _ = judge([cpu_unit(collapsing)], {}, [])
    assert overall == "fail" and j.reasons == [
        "throughput decayed 83 % over the run (30,000 → 5,000 tokens/s; allowed 60 % on the CPU)"
    ], j
