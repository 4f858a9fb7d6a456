"""rigmon: hardware-health monitoring for machines that train neural networks.

The packages are the layers, lowest first; each imports only from those below it (its
``__init__`` says which), and ``tests/test_layers.py`` holds them to it:

- ``model``: a poll as one immutable sample, the table of readings, recordings, units, text
- ``system``: the heap, systemd's notify socket, logging
- ``readers``: NVML, psutil, hwmon and /proc, live, recorded or replayed
- ``alerts``: the rule language and its engine
- ``config``: the TOML config, validated, and as the plain data that runs
- ``poller`` (a module): the readers a config chooses, into one sample per poll
- ``sinks``, ``exporters``, ``status``: where each poll goes (InfluxDB, notifiers, history,
  the job ledger; the Prometheus families; the terminal's table)
- ``pipeline`` (a module): the poller, the rules and every output, stepped by each loop
- ``http``: the server, the page and its API, charts
- ``daemon``, ``burnin``, ``offline``: the loops
- ``commands``: the command line
"""

from pathlib import Path as _Path

__version__ = "0.2.0"

# what the package carries beside its code (the page, the demo recording): a plain path, as
# pip installs it; importlib.resources would cost every start its 25 ms of imports
DATA = _Path(__file__).resolve().parent / "data"
