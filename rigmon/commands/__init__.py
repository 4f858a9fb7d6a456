"""The ``rigmon`` command: one module per sub-command under ``rigmon.commands``, each with its
parser and its handler; what they share is in ``common``.

May import: everything. Nothing imports it but ``rigmon.__main__``."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from .. import __version__
from ..model.recording import RecordingError
from ..model.text import fit, printable, printable_lines, terminal_width
from ..system import logs
from .common import UsageError

# each sub-command and the module with its parser, in the order help lists them: a command
# imports only its own module (and what that imports), however many others there are
COMMANDS = {
    "status": "status",
    "record": "record",
    "config": "config",
    "run": "run",
    "rules": "rules",
    "doctor": "rules",
    "jobs": "jobs",
    "baseline": "baseline",
    "burnin": "burnin",
}


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error in one line (exit 2): what is wrong and where help is."""

    def error(self, message: str):
        self.exit(2, printable(f"{self.prog}: {message} (see {self.prog} --help)") + "\n")


def parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser: for ``argv`` that names a sub-command, with that one only;
    else (help, a mistake, none given) with them all."""
    p = _Parser(prog="rigmon", description="Hardware-health monitoring for GPU training rigs.")
    p.add_argument("--version", action="version", version=f"rigmon {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    named = next((a for a in argv or () if not a.startswith("-")), None)
    modules = [COMMANDS[named]] if named in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for module in modules:
        importlib.import_module(f".{module}", __name__).add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser(argv).parse_args(argv)
    from ..model import generated
    from ..system import codecache

    generated.compiler = codecache.compiled  # the code generated at start, kept from the last
    from ..config.settings import ConfigError  # no config models: a command builds them if it needs them

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logs.SafeFormatter(logs.FORMAT))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])
    try:
        return args.func(args)
    except ConfigError as e:
        width = terminal_width(sys.stderr)
        for path, message in e.problems:  # every problem in one pass, each within the terminal
            text = printable(f"{e.source}: {path}: {message}" if path else f"{e.source}: {message}")
            print(fit(text, width, hang=4), file=sys.stderr)
        return 2
    except (RecordingError, UsageError) as e:
        print(fit(printable_lines(f"rigmon: {e}"), terminal_width(sys.stderr), hang=4), file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C, wherever it lands: quietly, with the shell's code for SIGINT
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (status --watch --json | head -1): not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0
