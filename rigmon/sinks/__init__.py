"""Push sinks: consume samples and deliver them elsewhere (InfluxDB)."""
