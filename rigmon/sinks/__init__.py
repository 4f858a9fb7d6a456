"""Sinks: each takes every poll's result and delivers it somewhere. ``influxdb`` (with its
disk ``spool`` and ``lineprotocol``), ``alerts`` (the rules evaluated, their transitions sent
by ``notify``), ``history`` (the page's week), ``jobs`` (the job ledger), ``known`` (what the
box has had, across restarts); ``base`` is what they share, ``retry`` the pacing of retries.

May import: ``model``, ``system``, ``readers`` (a process's executable), ``alerts``, ``config``."""
