"""``python -m rigmon.config.validate [REQUEST]`` (else REQUEST on standard input): validate a config
and write it to standard output as pickled ``rigmon.config.settings.Settings`` (or the
``ConfigError``) with what it warned of ((logger, level, message) each), for
``settings.validated``: the parent, a daemon, gets its config without importing pydantic.
REQUEST is JSON: {"path": file or null, "overrides": {table: {field: value}}, "text": the
file's text, read before}."""

from __future__ import annotations

import json
import logging
import pickle
import sys

from ..system import logs
from . import schema as configmod
from .settings import Caught


def main(argv: list[str]) -> int:
    handler = logging.StreamHandler(sys.stderr)  # a deprecated name's warning, as the daemon logs
    handler.setFormatter(logs.SafeFormatter(logs.FORMAT))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    catch = Caught()
    logging.getLogger().addHandler(catch)
    request = json.loads(argv[1] if len(argv) > 1 else sys.stdin.buffer.read())
    try:
        config = configmod.load(request["path"], text=request.get("text"))
        overrides = request["overrides"]
        if overrides:
            data = config.model_dump()
            for table, fields in overrides.items():
                data[table].update(fields)
            config = configmod.parse(data, "command line")
        answer = configmod.settings(config)
    except configmod.ConfigError as e:
        answer = e
    sys.stdout.buffer.write(pickle.dumps((answer, catch.said()), protocol=pickle.HIGHEST_PROTOCOL))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
