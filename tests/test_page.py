"""The daemon's page at / in a real Chromium, against ``rigmon run --replay`` of an 8-GPU box with
a GPU throttling for heat and a CPU fan that stopped: what a person sees, read from the DOM;
it updates without a reload; it fits a 1400 px screen and a 400 px phone without scrolling
sideways. And its API, behind the same basic auth as /metrics."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import time

import pytest
import scenarios as sc
from browser import broken_words
from servers import Rigmon, http_get, wait_for

HOT_GPU = 2
CONFIG = """
[alerts.builtin.GpuThermalSlowdown]
for = "1s"
[alerts.builtin.FanStalled]
for = "2s"
[alerts.builtin.GpuPowerCapped]
for = "1s"
[alerts.power_budget]
watts = 6000
[jobs]
price_per_kwh = 0.3
currency = "EUR"
"""


def throttling_box(tmp_path):
    """sc.rich's 8 H200s (jobs, an XID on GPU 3), GPU 2 held in hardware thermal slowdown, and
    the nct6798's second fan turning for the first 4 s of each loop, then stopped."""
    rec = copy.deepcopy(sc.rich(sc.h200()))
    rec.header["hostname"] = "rig-07\x1b[2J"  # the recorded box's name, as `rigmon record` writes it
    t0 = rec.ticks[0]["t"]
    for entry in [rec.header, *rec.ticks]:
        entry["gpus"][HOT_GPU]["nvmlDeviceGetCurrentClocksEventReasons"] = 0x40
    for tick in rec.ticks:
        fans = copy.deepcopy(sc.FAN_STOPPED)
        fans["nct6798"][1][1] = 900 if tick["t"] - t0 < 4 else 0
        tick["host"]["sensors_fans"] = fans
    return sc.write(rec, tmp_path / "box.rec.jsonl")


@pytest.fixture
def daemon(tmp_path):
    rigmon = Rigmon(tmp_path, throttling_box(tmp_path), CONFIG)
    rigmon.wait_ready()
    yield rigmon
    rigmon.stop()


def test_the_page_shows_the_box_its_alerts_and_jobs_and_updates_itself(daemon, chromium, tmp_path):
    daemon.wait_output("the page: http://127.0.0.1:")  # rigmon run says where the page is
    page = daemon.url.replace("/metrics", "/")
    chromium.open(page, 1400)
    wait_for(lambda: chromium.js("document.querySelectorAll('#gpus .card').length") == 8, 30, what="eight GPU cards")
    # the recorded box's name (made printable), not this machine's
    assert chromium.js("document.getElementById('host').textContent") == "rig-07\\x1b[2J"
    assert json.loads(http_get(page + "api/state")[1])["host"] == "rig-07\\x1b[2J"
    # a replay says so at the top, with its file: what is shown is not this box's hardware
    banner = chromium.js(
        "document.getElementById('replay').hidden ? '' : document.getElementById('replay').textContent"
    )
    assert "a replay, not this box's hardware: box.rec.jsonl" in banner, banner
    # the banner is one line, the box's facts on request; its time is 24-hour, as the CLI's
    line = "Math.round(document.querySelector('header').getBoundingClientRect().height)"
    one = chromium.js(line)
    assert one <= 1.5 * chromium.js("document.getElementById('host').getBoundingClientRect().height"), one
    assert chromium.js("document.getElementById('about').open") is False
    chromium.js("document.querySelector('#about summary').click(); 0")
    assert "driver " in chromium.js("document.getElementById('facts').innerText") and chromium.js(line) > one
    chromium.js("document.querySelector('#about summary').click(); 0")
    assert re.fullmatch(r"as of \d\d:\d\d:\d\d", chromium.js("document.getElementById('updated').textContent"))
    local = "Date.UTC(2026, 11, 7, 15, 3, 20) / 1000 + new Date().getTimezoneOffset() * 60"
    assert chromium.js(f"clock({local}, true)") == "2026-12-07 15:03:20"
    names = chromium.js("[...document.querySelectorAll('.gpu-name')].map(e => e.textContent)")
    assert names == ["NVIDIA H200"] * 8
    powers = chromium.js("[...document.querySelectorAll('.gpu-power')].map(e => e.textContent)")
    assert len(powers) == 8 and all(p.endswith(" W") and float(p[:-2]) > 0 for p in powers)
    # a reading of the table the card has no words of its own for is shown by its unit: the PCIe replays
    shown = chromium.js("[...document.querySelectorAll('#gpu-0 .reading')].map(e => e.dataset.reading)")
    assert "pcie_replays" in shown, shown
    # each card's cooling against its own baseline: a replay of seconds is still learning it, and
    # a GPU past its baseline says how much hotter it runs, and where
    lines = chromium.js("[...document.querySelectorAll('#gpus .cooling')].map(e => e.textContent)")
    assert lines == ["cooling: learning its baseline, 3.0 d to go"] * 8, lines
    # a reading in bytes in the unit that suits it (a 1.7 MB reading is not "0.0 GiB")
    shown = "(v) => reading({name: 'job_memory_bytes', unit: 'bytes', doc: ''}, v).textContent"
    assert chromium.js(f"[1.7e6, 512, 80 * 2 ** 30].map({shown})") == [
        "job memory 1.6 MiB",
        "job memory 512 B",
        "job memory 80.0 GiB",
    ]
    said = chromium.js("cooling({state: 'comparing', drift: 9.2, own: 9.2, at_watts: 300})")
    assert said == "runs 9 °C hotter at 300 W than in its first days", said

    # the firing alerts, with their subjects: the hot GPU and the stopped fan
    def alerts():
        return chromium.js(
            "[...document.querySelectorAll('#alerts tr.alert')].map(r => [...r.cells].map(c => c.textContent))"
        )

    found = wait_for(
        lambda: (rows := alerts()) and {r[1] for r in rows} >= {"GpuThermalSlowdown", "FanStalled"} and rows,
        40,
        what="the thermal and fan alerts on the page",
    )
    assert [r[2] for r in found if r[1] == "GpuThermalSlowdown"] == [f"gpu={HOT_GPU}"]
    assert any("nct6798" in r[2] for r in found if r[1] == "FanStalled")
    # the seven power-capped GPUs (info: normal at full load; GPU 2 is held for heat instead) are one
    # row, folded away below
    capped = wait_for(
        lambda: chromium.js(
            "[...document.querySelectorAll('#info-alerts tr.alert')].map(r => [...r.cells].map(c => c.textContent))"
        ),
        40,
        what="the info alerts' row",
    )
    assert [(r[1], r[2]) for r in capped] == [("GpuPowerCapped", f"GPUs 0–{HOT_GPU - 1}, {HOT_GPU + 1}–7")], capped
    assert capped[0][3].endswith("(and 6 more)")
    assert "GpuPowerCapped" not in {r[1] for r in alerts()}
    assert chromium.js("document.getElementById('infos').open") is False
    assert chromium.js("document.querySelector('#infos summary').textContent").startswith("7 info alert(s)")
    # the overview above the cards: every GPU's power against its limit, temperature against its
    # slowdown threshold, utilisation and memory, coloured by its worst alert; and the host's tile
    state = json.loads(http_get(page + "api/state")[1])
    tiles = chromium.js(
        "[...document.querySelectorAll('#overview .ov')].map(t => ({id: t.id, state: t.dataset.state,"
        " v: Object.fromEntries([...t.querySelectorAll('b[data-v]')].map(b => [b.dataset.v, b.textContent]))}))"
    )
    assert [t["id"] for t in tiles] == [f"ov-{i}" for i in range(8)] + ["ov-host"], tiles
    for t, g in zip(tiles, state["gpus"], strict=False):
        watts, limit = t["v"]["power"].removesuffix(" W").split(" / ")
        assert 0 < float(watts) <= 1.1 * g["power_limit_watts"] and float(limit) == round(g["power_limit_watts"])
        assert t["v"]["temp"].endswith(f" / {g['slowdown_celsius']:.0f} °C"), t
        assert t["v"]["util"].endswith(" %") and t["v"]["mem"].endswith(f" / {g['memory_total_bytes'] / 2**30:.0f} GiB")
    assert tiles[HOT_GPU]["state"] in ("warning", "critical") and tiles[0]["state"] == "ok", tiles
    wait_for(
        lambda: (
            chromium.js("document.getElementById('ov-host').dataset.state") == "critical"
            and "stopped" in chromium.js("document.querySelector('#ov-host b[data-v=fans]').textContent")
        ),
        30,
        what="the host tile with its stopped fan",
    )
    # the jobs table: the training job on all eight GPUs, its energy and cost
    jobs = wait_for(
        lambda: chromium.js(
            "[...document.querySelectorAll('#jobs tr.job')].map(r => [...r.cells].map(c => c.textContent))"
        ),
        30,
        what="the jobs table",
    )
    assert jobs[0][1] == "alice/pgid:4242" and jobs[0][3] == "0,1,2,3,4,5,6,7" and jobs[0][4] == "running"
    assert jobs[0][6].endswith(" kWh") and jobs[0][7].endswith(" EUR")

    # a chart's last point moves with the polls, without a reload
    last_point = (
        "(() => { const l = document.querySelector('#gpu-0 svg[data-chart=power] polyline');"
        " return l ? l.getAttribute('points').split(' ').pop() : null })()"
    )
    first = wait_for(lambda: chromium.js(last_point), 30, what="the power chart")
    # a daemon younger than the range: the chart starts where its data does, on a time axis in seconds
    power = "document.querySelector('#gpu-0 svg[data-chart=power]')"
    ticks = chromium.js(f"[...{power}.querySelectorAll('.xtick')].map(t => t.textContent)")
    assert ticks[-1] == "now" or ticks[0] == "now", ticks
    assert all(t == "now" or t.endswith(" s") or t.endswith(" min") for t in ticks) and "−60 min" not in ticks, ticks
    starts, span = chromium.js(
        f"(() => {{ const [l, , w] = {power}.dataset.plot.split(',').map(Number);"
        f" const x = +{power}.querySelector('polyline').getAttribute('points').split(',')[0];"
        f" return [(x - l) / w, +{power}.dataset.t.split(',')[1]] }})()"
    )
    # (a chart spans 10 s at least: a daemon younger than that starts further in)
    assert span < 120 and (starts < 0.1 or span <= 10.5 + 1e-6), f"the data starts {starts:.0%} into {span} s"
    # the value and the time under the pointer: the power read back from the chart, as /api/state has it
    tip = chromium.js(
        f"(() => {{ const s = {power}; s.scrollIntoView(); const b = s.getBoundingClientRect(),"
        " [l, t, w, h] = s.dataset.plot.split(',').map(Number), k = b.width / s.viewBox.baseVal.width;"
        " s.dispatchEvent(new PointerEvent('pointermove', {bubbles: true, clientX: b.left + (l + w * 0.9) * k,"
        " clientY: b.top + (t + h / 2) * k})); const e = document.getElementById('tip');"
        " return e.hidden ? null : e.textContent })()"
    )
    assert tip and tip.startswith("power ") and " W · " in tip and (tip.endswith(" ago") or tip.endswith("now")), tip
    watts = float(tip.split(" ")[1])
    limit = state["gpus"][0]["power_limit_watts"]
    assert 20 < watts <= 1.05 * limit, tip  # idle (84 W) or loaded (690 W), as the recording was then
    chromium.js("window.__same_page = 1")
    wait_for(lambda: chromium.js(last_point) != first, 30, what="the chart's last point to move")
    assert chromium.js("window.__same_page") == 1  # the same document: no reload
    # each poll's state, but the charts only when the daemon has drawn them again (every 5 s for the hour)
    chromium.js(
        "window.__asked = []; window.__pending = 0; const f = window.fetch; "
        "window.fetch = (u, o) => { window.__asked.push("
        "new URL(u, location.href).href.slice(location.origin.length + 1)); window.__pending++; "
        "return f(u, o).finally(() => window.__pending--); }; 0"
    )

    def asked_for(what: str, asked: list[str]) -> int:
        return sum(u.startswith(what) for u in asked)

    asked = wait_for(
        lambda: (a := chromium.js("window.__asked")) and asked_for("api/state", a) >= 8 and a,
        30,
        what="eight polls' states asked",
    )
    assert 1 <= asked_for("api/charts", asked) <= 3, asked  # the charts at most every 5 s of the 8
    on_screen = [u.partition("cards=")[2].split(",") for u in asked if u.startswith("api/charts")]
    assert all(cards and "7" not in cards and "host" not in cards for cards in on_screen), asked
    # the page asks for the charts of the cards on screen only: a card below the window shows its
    # charts as first drawn until it scrolls into view, and then asks for the latest at once
    drawn = "[...document.querySelectorAll('#gpus .card')].map(c => +c.dataset.time)"
    cards = wait_for(
        lambda: (d := chromium.js(drawn))[0] > d[7] and d, 60, what="a later drawing on the cards on screen only"
    )
    assert cards[7] == min(cards)  # GPU 0 on screen, drawn again; GPU 7 far below, as first drawn
    assert chromium.js("document.getElementById('gpu-7').getBoundingClientRect().top") > 900 + 200
    chromium.js("document.getElementById('gpu-7').scrollIntoView(); 0")
    wait_for(
        lambda: chromium.js("+document.getElementById('gpu-7').dataset.time") > cards[7],
        10,
        what="GPU 7's charts asked for as it scrolls into view",
    )
    assert any("cards=" in u and "7" in u.partition("cards=")[2].split(",") for u in chromium.js("window.__asked"))
    # the alert's transition is marked on the hot GPU's charts
    chromium.js(f"document.getElementById('gpu-{HOT_GPU}').scrollIntoView(); 0")
    wait_for(
        lambda: chromium.js(f"document.querySelectorAll('#gpu-{HOT_GPU} line.mark').length") > 0,
        15,
        what="the thermal alert marked on the hot GPU's charts",
    )
    # a tab in the background (document.hidden, as the browser sets it) asks nothing; shown again,
    # it asks at once
    chromium.js(
        "window.__hidden = true; Object.defineProperty(document, 'hidden', {configurable: true, "
        "get: () => window.__hidden}); document.dispatchEvent(new Event('visibilitychange')); 0"
    )
    time.sleep(1.2)  # the poll armed before (1 s) comes once more, and arms none
    wait_for(lambda: chromium.js("window.__pending") == 0, 10, what="the requests under way to finish")
    chromium.js("window.__asked = []; 0")
    time.sleep(2.5)  # more than two polls (1 s apart) not asked: an absence takes its time to show
    assert chromium.js("window.__asked") == []
    chromium.js("window.__hidden = false; document.dispatchEvent(new Event('visibilitychange')); 0")
    wait_for(
        lambda: any(u.startswith("api/state") for u in chromium.js("window.__asked")), 1, what="a state asked at once"
    )

    for width in (1400, 400):
        chromium.open(page, width)
        wait_for(
            lambda: chromium.js("document.querySelectorAll('#gpus .card svg').length") >= 8 * 9,
            30,
            what=f"the charts at {width} px",
        )
        sideways = chromium.js("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert sideways <= 0, f"{sideways} px of horizontal scroll at {width} px"
        wait_for(lambda: chromium.js("document.querySelectorAll('#alerts tr.alert').length") > 0, 30, what="alerts")
        # no word broken across lines in the alerts, the overview or the jobs: each word's box is one line
        broken = chromium.js(broken_words("#alerts, #info-alerts, #overview, #jobs"))
        assert broken == [], f"words broken at {width} px: {broken}"
        # the overview, and a way to the jobs and the burn-in, at the top of a phone's screen
        assert chromium.js("document.getElementById('ov-0').getBoundingClientRect().top") < 900
        assert chromium.js("document.querySelector('#jump a[href=\"#jobs-h\"]').getBoundingClientRect().top") < 450
        shot = tmp_path / f"page-{width}.png"
        chromium.screenshot(shot)
        assert shot.stat().st_size > 30_000


def test_the_api_answers_scripts(daemon):
    base = daemon.url.replace("/metrics", "")
    daemon.wait_polls(3)
    status, body = http_get(base + "/api/history?series=gpu0/power_watts,gpu1/*&since=-60&step=5")
    assert status == 200
    found = json.loads(body)
    assert {"since", "until", "step", "series"} <= found.keys() and found["step"] == 5
    assert "gpu0/power_watts" in found["series"] and "gpu1/temperature_celsius" in found["series"]
    assert all(len(p) == 4 and p[1] <= p[2] <= p[3] for p in found["series"]["gpu0/power_watts"])
    assert "gpu2/power_watts" not in found["series"]
    state = json.loads(http_get(base + "/api/state")[1])
    assert len(state["gpus"]) == 8 and state["driver"] and state["interval"] == 1
    jobs = json.loads(http_get(base + "/api/jobs")[1])
    assert jobs["running"][0]["job"] == "alice/pgid:4242"
    assert http_get(base + "/api/history?since=nan")[0] == 400
    assert http_get(base + "/api/charts?range=2y")[0] == 400
    # the charts: every card, or those asked for (as the page asks for the ones on its screen)
    every = json.loads(http_get(base + "/api/charts?range=1h")[1])
    assert sorted(every["gpus"], key=int) == [str(k) for k in range(8)] and every["host"]
    assert all(len(svgs) == 9 and all(s.startswith("<svg") for s in svgs) for svgs in every["gpus"].values())
    some = json.loads(http_get(base + "/api/charts?range=1h&cards=1,host,9,x")[1])  # no GPU 9, no card x
    assert list(some["gpus"]) == ["1"] and some["host"] and set(some["drawn"]) == {"1", "host"}
    assert some["gpus"]["1"] == every["gpus"]["1"] or some["drawn"]["1"] > every["drawn"]["1"]
    assert some["every"] == 5 and some["next"] >= min(some["drawn"].values())
    assert json.loads(http_get(base + "/api/charts?range=7d&cards=0")[1])["gpus"].keys() == {"0"}
    assert http_get(base + "/burnin/report")[0] == 404  # no burn-in ran here


AUTH = f"""
[prometheus.basic_auth]
username = "admin"
password_sha256 = "{hashlib.sha256(b"s3cret").hexdigest()}"
"""


def test_basic_auth_guards_the_page_the_api_and_metrics(tmp_path):
    config = CONFIG + AUTH
    rigmon = Rigmon(tmp_path, throttling_box(tmp_path), config)
    try:
        rigmon.wait_ready()
        base = rigmon.url.replace("/metrics", "")
        paths = ["/", "/api/state", "/api/history", "/api/jobs", "/api/charts", "/metrics"]
        assert [http_get(base + p)[0] for p in paths] == [401] * len(paths)
        good = {"Authorization": "Basic " + base64.b64encode(b"admin:s3cret").decode()}
        assert [http_get(base + p, good)[0] for p in paths] == [200] * len(paths)
    finally:
        rigmon.stop()


def test_the_last_burn_in_and_its_report(tmp_path):
    """The page links the last burn-in's report, served from [burnin] reports_dir."""
    run = tmp_path / "reports" / "2026-12-04T10-00-00"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(
        json.dumps(
            {
                "format": "rigmon-burnin-summary",
                "version": 1,
                "host": "box",
                "started_unix": 1_796_000_000,
                "duration_seconds": 3600,
                "verdict": "fail",
                "units": [],
                "energy": {},
            }
        )
    )
    (run / "burnin.html").write_text("<!doctype html><title>burn-in</title><p id=verdict>FAIL</p>")
    config = CONFIG + f'\n[burnin]\nreports_dir = "{tmp_path / "reports"}"\n'
    rigmon = Rigmon(tmp_path, throttling_box(tmp_path), config)
    try:
        rigmon.wait_ready()
        base = rigmon.url.replace("/metrics", "/")
        burnin = json.loads(http_get(base + "api/state")[1])["burnin"]
        assert burnin["verdict"] == "fail" and burnin["duration_seconds"] == 3600
        status, page = http_get(base + burnin["report"])
        assert status == 200 and b"<p id=verdict>FAIL</p>" in page
    finally:
        rigmon.stop()


def test_the_page_opened_with_credentials_in_its_address_shows_the_gpus(tmp_path, chromium):
    """http://user:password@host:port/: the page asks its API without them in the URL (fetch
    refuses such a URL) and the browser sends them; the page is whole, its script allowed by
    its own Content-Security-Policy."""
    config = CONFIG + AUTH
    rigmon = Rigmon(tmp_path, throttling_box(tmp_path), config)
    try:
        rigmon.wait_ready()
        chromium.open(f"http://admin:s3cret@127.0.0.1:{rigmon.port}/", 1400)
        wait_for(
            lambda: chromium.js("document.querySelectorAll('#gpus .card').length") == 8, 20, what="the 8 GPUs' cards"
        )
        text = chromium.js("document.body.innerText")
        assert "does not answer" not in text and "NVIDIA H200" in text, text[:2000]
        names = chromium.js("[...document.querySelectorAll('.gpu-name')].map(e => e.textContent)")
        assert names == ["NVIDIA H200"] * 8
    finally:
        rigmon.stop()


def test_the_page_and_api_headers(daemon):
    import re
    import urllib.request

    base = daemon.url.replace("/metrics", "")

    def headers(path):
        with urllib.request.urlopen(base + path, timeout=10) as r:
            return {k.lower(): v for k, v in r.headers.items()}, r.read()

    page, html = headers("/")
    csp = page["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-eval" not in csp
    scripts = re.findall(rb"<script>(.*?)</script>", html, re.S)
    assert scripts and all(f"'sha256-{base64.b64encode(hashlib.sha256(s).digest()).decode()}'" in csp for s in scripts)
    assert "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]
    for path in ("/", "/api/state", "/api/charts", "/api/history", "/api/jobs"):
        got, _ = headers(path)
        assert got["x-content-type-options"] == "nosniff" and got["referrer-policy"] == "no-referrer", path
        assert got["x-frame-options"] == "DENY", path
        if path.startswith("/api/"):
            assert got["cache-control"] == "no-store", path


def fault_that_resolves(tmp_path):
    """Eight GPUs: GPU 0 at 95 °C for its first 60 s and GPU 5 from 120 to 240 s
    (GpuAtSlowdownTemperature, critical), each cool after; the six others power-capped on and off
    every 3 s all along (GpuPowerCapped: info), for 20 minutes."""

    def modify(t, tick):
        for n, g in enumerate(tick["gpus"]):
            if n == 0:
                g["nvmlDeviceGetTemperature:0"] = 95 if t < 60 else 50
            elif n == 5:
                g["nvmlDeviceGetTemperature:0"] = 95 if 120 <= t < 240 else 50
            else:
                g["nvmlDeviceGetCurrentClocksEventReasons"] = 0x4 if (t // 3) % 2 else 0

    return sc.write(sc.timeline(1260, 1, gpus=8, modify=modify), tmp_path / "fault.rec.jsonl")


def test_after_faults_resolve_the_page_lists_them_and_marks_only_their_gpus_by_name(tmp_path, chromium):
    budget = CONFIG.replace("watts = 6000", "watts = 12000")  # eight H200s at full load: within it
    rigmon = Rigmon(tmp_path, fault_that_resolves(tmp_path), budget, extra_args=["--speed", "5"])
    try:
        rigmon.wait_ready()
        wait_for(
            lambda: rigmon.output().count("resolved critical GpuAtSlowdownTemperature") == 2,
            90,
            what="both faults resolved",
        )
        chromium.open(rigmon.url.replace("/metrics", "/"), 1400)
        rows = wait_for(
            lambda: (
                (
                    r := chromium.js(
                        "[...document.querySelectorAll('#incident-list tbody tr')]"
                        ".map(r => [...r.cells].map(c => c.textContent))"
                    )
                )
                and len(r) >= 2
                and r
            ),
            30,
            what="the resolved faults listed",
        )
        # newest first, each with its GPU, its 24-hour start and how long it lasted
        assert [(r[0], r[1]) for r in rows] == [
            ("GpuAtSlowdownTemperature", "gpu=5"),
            ("GpuAtSlowdownTemperature", "gpu=0"),
        ], rows
        assert all(re.fullmatch(r"\d\d:\d\d:\d\d", r[2]) for r in rows), rows
        assert rows[0][3].endswith((" s", " min")) and rows[1][3].endswith(" s"), rows  # 2 min and 1 min of the replay
        assert chromium.js("document.querySelector('#alerts tbody').textContent").startswith("no alert firing")

        def marks(gpu: int) -> list:
            return _marks(chromium, gpu)

        for hot in (0, 5):
            drawn = wait_for(
                lambda hot=hot: (m := marks(hot)) and "GpuAtSlowdownTemperature" in m and m,
                30,
                what=f"GPU {hot}'s mark",
            )
            assert set(drawn) == {"GpuAtSlowdownTemperature", "|"}, drawn  # every mark named: its own alert only
        for calm in (1, 2, 3, 4, 6, 7):  # their info flapping draws nothing
            wait_for(lambda calm=calm: chromium.js(f"document.querySelectorAll('#gpu-{calm} svg').length") > 0, 30)
            assert marks(calm) == [], (calm, marks(calm))
    finally:
        rigmon.stop()


def test_a_box_that_watches_nothing_says_so_in_red(tmp_path, chromium):
    """This machine as it is (no GPU, no hwmon sensor): rules cannot evaluate, so the overview's
    host tile is red and says nothing is watched, never "ok"."""
    rigmon = Rigmon(tmp_path)
    try:
        rigmon.wait_ready()
        chromium.open(rigmon.url.replace("/metrics", "/"), 1400)
        wait_for(lambda: chromium.js("document.getElementById('ov-host') !== null"), 30, what="the overview")
        assert chromium.js("document.getElementById('ov-host').dataset.state") == "critical"
        assert "nothing watched here" in chromium.js("document.getElementById('ov-host').textContent")
    finally:
        rigmon.stop()


def _marks(chromium, gpu: int) -> list:
    """The marks drawn on a GPU's card: each one's name, then a "|" for each line."""
    chromium.js(f"document.getElementById('gpu-{gpu}').scrollIntoView(); 0")
    return chromium.js(
        f"[...document.querySelectorAll('#gpu-{gpu} .mark-name')].map(e => e.textContent)"
        f".concat([...document.querySelectorAll('#gpu-{gpu} line.mark')].map(() => '|'))"
    )


def test_a_drifting_gpus_card_has_its_drift_chart_against_the_alerts_threshold(tmp_path, chromium):
    """Two weeks of 4 GPUs (training by day, idle at night, a tick every 10 minutes) replayed
    10,000 times as fast with the built-in cooling settings: GPU 0's heatsink clogs from day 3.5
    (30 % over 5 days) and GpuCoolingDrift fires on it. Its card charts the drift with the
    alert's 6 °C drawn and its mark named; the others, whose only transitions are their power
    cap's info, have no mark."""
    clogs = lambda k, t: 0.1 * (1 + (0.3 * min(1.0, max(0.0, (t / sc.DAY - 3.5) / 5)) if k == 0 else 0))  # noqa: E731
    rigmon = Rigmon(
        tmp_path,
        sc.write(sc.cooling_days(14, gpus=4, resistance=clogs), tmp_path / "drift.rec.jsonl"),
        extra_args=["--speed", "10000"],
    )
    try:
        rigmon.wait_ready()
        base = rigmon.url.replace("/metrics", "")
        # day 6.8 or so, about 70 s in: before the recording loops at 121 s
        firing = re.compile(r'^rigmon_alert_active\{alertname="GpuCoolingDrift",gpu="0",[^}]*\} 1\.0$', re.M)
        wait_for(lambda: firing.search(http_get(rigmon.url)[1].decode()), 100, what="GpuCoolingDrift on GPU 0")
        cards = json.loads(http_get(base + "/api/charts?range=7d&cards=0")[1])["gpus"]
        svg = next((svg for svg in cards.get("0", []) if "cooling drift" in svg), None)
        assert svg is not None and "alert 6 °C" in svg, cards.get("0")
        # as a person sees it: on GPU 0's card, with the alert's line and its mark
        chromium.open(base + "/", 1400)
        week = "document.querySelector('#ranges button[data-range=\"7d\"]')"
        wait_for(lambda: chromium.js(f"{week} !== null"), 30, what="the page's ranges")  # navigated, not yet parsed
        chromium.js(f"{week}.click(); 0")

        def titles(gpu: int) -> list[str]:
            return chromium.js(f"[...document.querySelectorAll('#gpu-{gpu} svg .title')].map(t => t.textContent)")

        wait_for(lambda: any("cooling drift" in x for x in titles(0)), 30, what="the drift chart on GPU 0's card")
        drawn = chromium.js(
            "[...document.querySelectorAll('#gpu-0 svg')].map(s => s.textContent)"
            ".find(t => t.includes('cooling drift'))"
        )
        assert "alert 6 °C" in drawn, drawn
        marked = wait_for(lambda: (m := _marks(chromium, 0)) and "GpuCoolingDrift" in m and m, 30, what="the mark")
        assert set(marked) == {"GpuCoolingDrift", "|"}, marked
        for calm in (1, 2, 3):
            assert _marks(chromium, calm) == [], (calm, _marks(chromium, calm))
    finally:
        rigmon.stop()


def test_a_chart_past_48_hours_counts_its_time_in_days():
    """As the page says a duration (``ago``): hours up to two days, then days."""
    from rigmon.http.charts import chart

    def ticks(span: float) -> list[str]:
        line = [(0.0, 1.0, 1.0, 1.0), (span, 2.0, 2.0, 2.0)]
        svg = chart("power", [("GPU 0", line, "#000")], "W", span=span, ago=True)
        return re.findall(r'class="tick xtick">([^<]*)<', svg)

    week, day = ticks(7 * 86400), ticks(86400)
    assert "now" in week and all(t == "now" or t.endswith(" d") for t in week) and "−6 d" in week, week
    assert all(t == "now" or t.endswith(" h") for t in day), day


def test_readmes_screenshot_shows_the_page_as_it_is(tmp_path, chromium):
    """docs/page.png carries the outline of the page it was made from (tests/screenshot.py): the
    page of ``rigmon run --demo --replay-gpus 8`` now has the same, or README shows a page that
    is no more."""
    from browser import OUTLINE_KEY, PAGE_OUTLINE, text_of
    from screenshot import DEMO, ROOT

    shot = (ROOT / "docs" / "page.png").read_bytes()
    made_from = text_of(shot, OUTLINE_KEY)
    assert made_from, "docs/page.png has no outline: remake it with .venv/bin/python tests/screenshot.py"
    rigmon = Rigmon(tmp_path, extra_args=DEMO)
    try:
        rigmon.wait_ready()
        chromium.open(rigmon.url.replace("/metrics", "/"), 1400, 1000)
        wait_for(lambda: chromium.js("document.querySelectorAll('#gpus .card').length") == 8, 30, what="8 GPU cards")
        now = chromium.js(PAGE_OUTLINE)
    finally:
        rigmon.stop()
    assert now == json.loads(made_from), (
        "the page moved on from README's screenshot: remake it with .venv/bin/python tests/screenshot.py"
    )
