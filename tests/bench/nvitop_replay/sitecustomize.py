"""Put on PYTHONPATH, this makes any Python tool's pynvml answer from a rigmon recording: the
same pynvml-level replay rigmon's own --replay uses, so ``nvitop -1`` can be timed beside
``rigmon status`` on one machine with no GPU. RIGMON_REPLAY names the recording,
RIGMON_REPLAY_GPUS widens it; the seconds the set-up took are written to RIGMON_REPLAY_COST,
for the bench to take off the tool's wall time (a real GPU needs no replay)."""

import os

if os.environ.get("RIGMON_REPLAY"):
    import time

    import pynvml  # the tool imports it too: its cost stays in the tool's time

    started = time.perf_counter()

    from rigmon.model.recording import Recording
    from rigmon.readers.replay import ReplayClock, ReplaySource, replay_backend

    _recording = Recording.load(os.environ["RIGMON_REPLAY"])
    if os.environ.get("RIGMON_REPLAY_GPUS"):
        _recording = _recording.widened(int(os.environ["RIGMON_REPLAY_GPUS"]), shared=True)  # as status does
    _nvml = replay_backend(ReplaySource(_recording, ReplayClock(start_at=0.0, realtime=False)))
    for _name in list(vars(pynvml)):
        if _name.startswith("nvml") and callable(getattr(pynvml, _name)):
            try:
                setattr(pynvml, _name, getattr(_nvml, _name))
            except AttributeError:
                pass  # not a system or device call: nvmlLib and friends stay as they are
    if os.environ.get("RIGMON_REPLAY_COST"):
        with open(os.environ["RIGMON_REPLAY_COST"], "w") as f:
            f.write(str(time.perf_counter() - started))
