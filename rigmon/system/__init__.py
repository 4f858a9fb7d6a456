"""What rigmon asks of the operating system: the C heap it hands back (``heap``), systemd's
notify socket (``systemd``), and logging with repeats said once (``logs``).

May import: ``model``."""
