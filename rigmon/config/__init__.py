"""The config: ``schema`` validates a TOML file with pydantic (each field's meaning, default
and range, the error that names a bad field); ``settings`` is the validated config as plain,
read-only data, which is what runs: a daemon gets it from a child process
(``validate``) and never imports pydantic.

May import: ``model``, ``system`` (logging, in the child), ``alerts`` (the rule language a
config's rules are written in)."""
