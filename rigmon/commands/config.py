"""``rigmon config check|schema|example``."""

from __future__ import annotations

import json
import sys

from .common import add_config


def add_parser(sub) -> None:
    c = sub.add_parser("config", help="check the config or print its schema")
    csub = c.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    check = csub.add_parser("check", help="validate a config file and print the effective config")
    add_config(check)
    check.add_argument("file", nargs="?", help="the file to check (default: --config or the default path)")
    check.set_defaults(func=cmd_config_check)
    schema = csub.add_parser("schema", help="print the config's JSON Schema (for editors)")
    schema.set_defaults(func=cmd_config_schema)
    example = csub.add_parser("example", help="print every setting with its default and what it does (TOML)")
    example.set_defaults(func=cmd_config_example)


def cmd_config_check(args) -> int:
    from ..config import render
    from ..config import schema as configmod

    data, source = configmod.read(args.file or args.config)
    config = configmod.parse(data, source) if data else configmod.Config()
    print(f"# effective config from {source}; secrets masked")
    print(render.to_toml(render.masked(config, data)))
    print(f"\n# OK: {source} is a valid rigmon config")
    return 0


def cmd_config_schema(args) -> int:
    from ..config import schema as configmod

    print(json.dumps(configmod.schema(), indent=2))
    return 0


def cmd_config_example(args) -> int:
    from ..config import render

    sys.stdout.write(render.example())
    return 0
