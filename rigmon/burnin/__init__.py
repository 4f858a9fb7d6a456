"""``rigmon burnin``: train a GPT-style model on every GPU while watching the hardware, then
judge it. Needs PyTorch (the ``burnin`` extra)."""
