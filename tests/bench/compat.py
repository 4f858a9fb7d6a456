"""The daemon's pieces as the benches drive them, on this rigmon or an older one (the benches
compare versions: run one from this tree with an older rigmon installed)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry


def daemon_for(config, source, **kw):
    """(daemon, registry) over a replay, the readers open; ``kw`` as build_poller takes them."""
    from rigmon.daemon import Daemon

    try:
        from rigmon.pipeline import Pipeline
    except ImportError:  # before the pipeline: the daemon built its sinks around a poller
        from rigmon.poller import build_poller

        daemon = Daemon(config, build_poller(config, source, **kw))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(daemon.collector)
    else:
        try:
            from rigmon.pipeline import Inputs
        except ImportError:  # before Inputs: from_config took the replay and the backends as arguments
            daemon = Daemon(config, Pipeline.from_config(config, source, **kw))
        else:
            daemon = Daemon(config, Pipeline.from_config(config, inputs=Inputs(source=source, **kw)))
        registry = daemon.registry()
    poller(daemon).open()
    return daemon, registry


def poller(daemon):
    return daemon.pipeline.poller if hasattr(daemon, "pipeline") else daemon.poller


def alerts(daemon):
    return daemon.pipeline.alerts if hasattr(daemon, "pipeline") else daemon.alerts


def evaluate_alerts(daemon, sample) -> None:
    sink = alerts(daemon)
    (sink.evaluate if hasattr(sink, "evaluate") else sink.consume)(sample)


def collect_sample(daemon, sample) -> None:
    """The Prometheus collector taking the sample."""
    pipeline = getattr(daemon, "pipeline", None)
    if pipeline is None:
        daemon.collector.consume(sample)
        return
    from rigmon.sinks.base import PollResult

    pipeline.collector.consume(PollResult(sample))


def close(daemon) -> None:
    pipeline = getattr(daemon, "pipeline", None)
    if pipeline is not None:
        pipeline.close()
        return
    if daemon.jobs is not None:  # before the pipeline
        daemon.jobs.close()
    daemon.poller.close()
