"""Readers: the only code that touches hardware libraries. ``gpu`` talks to NVML, ``host``
to psutil and sysfs. Each returns parts of a ``rigmon.sample.Sample`` in base units."""
