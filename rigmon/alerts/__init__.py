"""Alerts: rules as data (``rules``), what they see in a sample (``entities``), the pure
engine that turns sample history into transitions (``engine``), and notifiers that
deliver transitions (``notify``)."""
