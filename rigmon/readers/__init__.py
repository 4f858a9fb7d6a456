"""Readers: the only code that touches hardware libraries, and the record and replay of it.
``gpu`` talks to NVML (``nvml``: the bindings as it calls them, the only module importing
them; ``gpu_values``: its answers made values and readings; ``gpu_facts``: each GPU's facts
read once, and the GPUs the box had that NVML no longer lists; ``xid``: the XID events'
thread), ``host`` and ``hwmon`` to psutil and sysfs (a GPU's runtime power state too: asking
NVML would wake it), ``procs`` to /proc; each returns parts of a ``rigmon.model.sample.Sample`` in base
units. ``record`` writes the calls and answers to a recording; ``replay`` answers the same
calls from one, so the real reader code runs on it.

May import: ``model``, ``system``."""
