"""Exporters and sinks: consume samples, never read hardware."""
