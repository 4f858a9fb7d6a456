"""What rigmon asks of the operating system: the C heap it hands back (``heap``), systemd's
notify socket (``systemd``), logging with repeats said once (``logs``), state files
(``statefile``), and the user's cache (``cache``), where the code generated at start is kept
(``codecache``).

May import: ``model``."""
