"""rigmon's exposition writer writes prometheus_client's bytes, format by format, for the
daemon's own families over many boards and ticks, and hands prometheus_client whatever it does
not write itself."""

import functools

import pytest
import scenarios as sc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics import exposition as om_format
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om

from rigmon.exporters.exposition import Exposition

# what Prometheus 2 and 3 send, a bare text scraper (curl), and text with an escaping
ACCEPTS = {
    "prometheus2": (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
        "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    ),
    "prometheus3": (
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
        "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
        "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
    ),
    "curl": "*/*",
    "text-utf8": "text/plain;version=1.0.0;escaping=allow-utf-8",
}
BOARDS = {
    "h200": lambda: sc.h200(),
    "rich8": lambda: sc.rich(sc.h200(), gpus=8),
    "fans-pre-ampere": lambda: sc.pre_ampere(sc.gpu_fans(sc.rich(sc.h200(), gpus=4))),
    "lost": lambda: sc.gpu_lost(sc.h200(), gpus=2, lost=1, from_second=20.0),
    "xid": lambda: sc.with_xid(sc.h200(), at_second=12.0, xid=79),
    "old-driver": lambda: sc.old_driver(sc.h200()),
}


@pytest.mark.parametrize("board", sorted(BOARDS))
def test_the_same_bytes_as_prometheus_client(board):
    """Each format, tick by tick (GPUs lost, XIDs counted, values moving): byte for byte what
    prometheus_client writes, while the kept prefixes carry over from render to render."""
    config = {
        "influxdb": {"enabled": False},
        "prometheus": {"enabled": False},
        "jobs": {"enabled": False},
        "gpu": {"process_series": 4},
    }
    writer = Exposition()
    encoders = {name: choose_encoder(accept)[0] for name, accept in ACCEPTS.items()}
    renders = 0
    with sc.Replayed(BOARDS[board](), config, loop=True) as replayed:
        for second in range(0, 40, 2):
            replayed.poll(float(second))
            for name, encoder in encoders.items():
                fast = writer.encoder(encoder)
                assert fast is not encoder, f"{name}: written by prometheus_client, not here"
                assert fast(replayed.registry) == encoder(replayed.registry), f"{name} at {second} s"
                renders += 1
    assert renders == 20 * len(ACCEPTS)


def test_what_it_does_not_write_prometheus_client_does():
    """A histogram, a counter's _created sample, a name outside the legacy characters and the
    'dots' escaping scheme: the whole exposition is prometheus_client's, and still parses."""
    registry = CollectorRegistry()
    Counter("jobs", "Jobs done.", ["user"], registry=registry).labels("alice").inc()
    Histogram("step_seconds", "Step time.", registry=registry).observe(0.2)
    Gauge("odd_name", 'A label value with "quotes", a \\ and a\nnewline.', ["path"], registry=registry).labels(
        'a"b\\c\nd'
    ).set(1e21)
    writer = Exposition()
    for accept in ACCEPTS.values():
        encoder = choose_encoder(accept)[0]
        assert writer.encoder(encoder)(registry) == encoder(registry)
    body = writer.encoder(choose_encoder(ACCEPTS["prometheus2"])[0])(registry).decode()
    families = {f.name: f for f in parse_om(body)}
    assert families["odd_name"].samples[0].labels == {"path": 'a"b\\c\nd'}
    assert families["odd_name"].samples[0].value == 1e21
    assert "step_seconds" in families
    dots = functools.partial(om_format.generate_latest, escaping="dots", version="1.0.0")
    assert Exposition().encoder(dots) is dots  # names change under it: prometheus_client's
    future = functools.partial(om_format.generate_latest, version="2.0.0")
    assert Exposition().encoder(future) is future


def test_values_as_go_writes_them():
    """Every value the formats treat apart: whole and tiny numbers, past 1e6 (Go's exponents),
    negative, infinite, NaN, booleans and ints."""
    registry = CollectorRegistry()
    gauge = Gauge("v", "Values.", ["n"], registry=registry)
    values = [
        0,
        -0.0,
        1,
        True,
        7.5,
        1e-7,
        999_999.9,
        1e6,
        1_980_000_000,
        143_771_090_944,
        2.5e21,
        -3e12,
        float("inf"),
        float("-inf"),
        float("nan"),
    ]
    for n, v in enumerate(values):
        gauge.labels(str(n)).set(v)
    writer = Exposition()
    for accept in ACCEPTS.values():
        encoder = choose_encoder(accept)[0]
        assert writer.encoder(encoder)(registry) == encoder(registry)


def test_line_protocol_writes_each_value_by_its_type():
    """The generated point writer against line(): a reading of the usual type is written inline,
    any other (an int where a float is usual, a float where a count is, a string, NaN and the
    infinities) as the line protocol's typing says; tag values escaped; a point with no field
    is no point."""
    from rigmon.model.sample import GpuInfo, GpuReading, Sample, SystemInfo
    from rigmon.sinks.lineprotocol import encode, line

    info = GpuInfo(index=0, uuid="GPU-a b", name="NVIDIA H200, 141GB=big")
    nan, inf = float("nan"), float("inf")
    odd = GpuReading(
        index=0,
        uuid="GPU-a b",
        power_watts=nan,
        power_limit_watts=inf,
        energy_joules=-inf,
        temperature_celsius=70,
        utilization_gpu_ratio=0.5,
        memory_used_bytes=2.5,
        memory_total_bytes=143_771_090_944,
        performance_state=True,
        pcie_generation="5",
        fan_speed_ratios=(0.3, None),
        fan_speed_rpm=(1800, nan),
    )
    sample = Sample(time=1_780_000_000.25, host=None, gpus=(odd,), gpu_info=(info,), system=SystemInfo())
    [point] = encode(sample, "rig 1")
    assert point == line(
        "gpu",
        {"host": "rig 1", "gpu": "0", "uuid": "GPU-a b", "name": info.name},
        {
            "lost": False,
            "temperature_celsius": 70,
            "utilization_gpu_ratio": 0.5,
            "memory_used_bytes": 2.5,
            "memory_total_bytes": 143_771_090_944,
            "performance_state": True,
            "pcie_generation": "5",
            "fan0_speed_ratio": 0.3,
            "fan0_speed_rpm": 1800,
        },
        int(round(sample.time * 1e9)),
    )
    assert point.startswith("gpu,gpu=0,host=rig\\ 1,name=NVIDIA\\ H200\\,\\ 141GB\\=big,uuid=GPU-a\\ b lost=false,")
    assert "temperature_celsius=70i" in point and "memory_used_bytes=2.5," in point
    assert "performance_state=true" in point and 'pcie_generation="5"' in point
    assert "power" not in point and "energy" not in point
    assert encode(sample._replace(gpus=(GpuReading(index=0, uuid="u", lost=None),)), "h") == []
    # a float's text is kept for the next time it comes: 0.0 and -0.0 are equal but written apart
    for _ in range(2):
        for v in (0.0, -0.0, 1e-7, 0.1 + 0.2, 700.0, -0.0, 0.0):
            [point] = encode(sample._replace(gpus=(GpuReading(index=0, uuid="u", power_watts=v),)), "h")
            assert f" lost=false,power_watts={v!r} " in point, (v, point)


def test_a_family_reads_like_prometheus_clients_own():
    """The daemon's families keep rows, not Samples: what prometheus_client reads of them is
    what its own counter and gauge families hold after the same adds, and a family emptied for
    the next render shares nothing with the one before."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from rigmon.exporters.exposition import Family

    for typ, theirs in (
        ("counter", CounterMetricFamily("x_errors", "Errors.", labels=["gpu", "kind"])),
        ("gauge", GaugeMetricFamily("x_errors", "Errors.", labels=["gpu", "kind"])),
    ):
        template = Family("x_errors", "Errors.", typ, ("gpu", "kind"))
        ours = template.empty()
        for labels, value in ((("0", "a"), 3), (("1", "b"), 0.5)):
            ours.add_metric(labels, value)
            theirs.add_metric(list(labels), value)
        assert (ours.name, ours.type, ours.documentation, ours.samples) == (
            theirs.name,
            theirs.type,
            theirs.documentation,
            theirs.samples,
        )
        assert template.rows == [] and template.empty().rows == []
    with pytest.raises(ValueError):
        Family("x_info", "Info.", "info", ())
    with pytest.raises(ValueError):
        Family("", "No name.", "gauge", ())  # prometheus_client's own check of the name
