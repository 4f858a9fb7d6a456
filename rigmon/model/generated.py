"""Where rigmon's generated source becomes code: Python's ``compile``, or what the command line
installs for its process (``rigmon.system.codecache``: the code an earlier start compiled). The
code is generated from rigmon's own tables and the config's checked rules: the table's
projections, the GPU reader's build, the rules' batches; none of them does I/O for it."""

from __future__ import annotations

from collections.abc import Callable
from types import CodeType

compiler: Callable[[str, str, str], CodeType] = compile


def compiled(source: str, filename: str, mode: str = "exec") -> CodeType:
    return compiler(source, filename, mode)
