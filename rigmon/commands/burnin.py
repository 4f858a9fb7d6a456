"""``rigmon burnin``: its options; the run itself is ``rigmon.burnin.run``."""

from __future__ import annotations

from ..model import args as argtypes
from .common import add_config


def add_parser(sub) -> None:
    p = sub.add_parser("burnin", help="train a GPT-style model on every GPU while watching the hardware; verdict")
    add_config(p)
    how_long = p.add_mutually_exclusive_group(required=True)
    how_long.add_argument("--hours", type=argtypes.positive)
    how_long.add_argument("--minutes", type=argtypes.positive)
    p.add_argument("--gpus", default="all", help="GPU indices, e.g. 0,1 (default: all)")
    p.add_argument("--report", metavar="DIR", help="where to write burnin.json and burnin.html")
    p.add_argument(
        "--model",
        default="auto",
        choices=["auto", "tiny", "small", "gpt2"],
        help="auto: GPT-2 small (124M) on 16 GB GPUs and more, smaller below, tiny on the CPU",
    )
    p.add_argument("--baseline", metavar="OLD.json", help="compare with an earlier report of this box")
    p.add_argument(
        "--force",
        action="store_true",
        help="run even while a chosen GPU runs a compute process (a "
        "training run): by default the burn-in refuses, exit 2",
    )
    p.add_argument(
        "--ddp",
        action="store_true",
        help="train data-parallel across the GPUs (NCCL): stresses "
        "the PCIe/NVLink paths between them (with --cpu: two CPU "
        "ranks over gloo)",
    )
    p.add_argument(
        "--cpu",
        action="store_true",
        help="train on the CPU (the GPUs are only watched); without a GPU this is the default",
    )
    p.add_argument(
        "--replay",
        metavar="FILE",
        help="the hardware's answers from a recording (rigmon record): with --cpu the model trains on "
        "the CPU and the report judges and draws the recorded GPUs, no GPU needed",
    )
    p.set_defaults(func=cmd_burnin)


def cmd_burnin(args) -> int:
    from ..burnin.run import cmd_burnin as run

    return run(args)
