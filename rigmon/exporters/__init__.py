"""Exporters: what a scrape reads. ``prometheus`` (the sample as Prometheus families, from the
table of readings), ``exposition`` (the text formats, written once per poll), ``burnin`` (the
newest burn-in report as metrics). They consume samples; they never read hardware.

May import: ``model``, ``system``, ``config``, ``sinks``."""
