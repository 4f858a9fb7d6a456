"""``rigmon burnin``: train a GPT-style model on every GPU while watching the hardware, then
judge it: ``run`` (the command: the workers, the watch, the exit code), ``worker`` and ``model``
and ``data`` (the training, in each worker), ``timeline`` and ``verdict`` (what was seen, and
judged), ``results`` and ``report`` (the report's data, and its HTML). Needs PyTorch (the
``burnin`` extra) in the worker processes only.

May import: everything below the commands (the pipeline watches the hardware meanwhile; the
report draws with ``rigmon.http.charts``)."""
