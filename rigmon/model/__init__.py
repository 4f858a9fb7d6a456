"""The model: what a poll is, in base units, and the table that says where each reading goes.

``sample`` (one immutable poll), ``polled`` (the per-poll NVML calls and fields),
``readings`` (the table of readings: unit, Prometheus family, InfluxDB field, rule variable),
``project`` (the code each output runs, made from the table), ``validity`` (the range of every
unit, and the check each sample passes), ``recording`` (the *rigmon recording v1* format),
``durations``, ``text`` (printable and escaped strings), ``args`` (checked command-line values),
``nvml_state`` (what NVML that cannot start means, and what mends it).

May import: nothing of rigmon's. Everything else builds on it."""
