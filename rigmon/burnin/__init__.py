"""``rigmon burnin``: train a GPT-style model on every GPU while watching the hardware, then
judge it. Needs PyTorch (the ``burnin`` extra) in the worker processes only.

May import: everything below the commands (the pipeline watches the hardware meanwhile; the
report draws with ``rigmon.http.charts``)."""
