"""Alerts: the rule language and its engine, with no I/O. ``specs`` (a rule as configured,
validated), ``rules`` (its expressions compiled), ``entities`` (what rules see in a sample:
each GPU, fan, CPU, PSU group, sensor), ``engine`` (sample history to transitions:
pending, firing, resolved, inhibited), ``xid`` (what each XID code means). Delivery is in
``rigmon.sinks`` (the alert sink and its notifiers).

May import: ``model``."""
