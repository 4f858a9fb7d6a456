"""Alert rules ready to evaluate: their expressions checked and compiled (``Rule``,
``Expression``, ``batch``). What a rule says, as a TOML table validated when the config loads,
is ``rigmon.alerts.specs`` (pydantic's models): a daemon that was handed its validated config
never imports them.

A rule applies to every entity of one ``kind`` (each GPU, fan, CPU socket, sensor, PSU group,
or the host). ``when`` is an expression over that kind's variables (see ``entities``), the
rule's ``params`` and a few functions over the sample history:

    increase(var, window)   rise of a counter over the window (resets count from zero)
    rate(var, window)       that rise per second
    avg_over(var, window), max_over(var, window), min_over(var, window)
    ever_max(var)           the largest value since rigmon started
    abs(x), min(a, b), max(a, b)

    known(x)                true when the hardware gave x (a threshold, a counter)

Windows and ``for`` are seconds or durations like "30s", "10m", "1h". A value the hardware
did not give (None) is unknown, and logic over it is three-valued (Kleene): a comparison or
arithmetic with an unknown term is unknown, ``True or unknown`` is true, ``False and
unknown`` is false, ``not unknown`` is unknown. An unknown condition neither fires nor
clears; the engine resolves an alert whose condition stays unknown too long.
"""

from __future__ import annotations

import ast
import logging
import re
import string
from collections.abc import Callable
from typing import Any, Literal

from ..model import generated
from ..model.durations import parse_duration
from .entities import DEPRECATED, KINDS, LABELS

HISTORY_FUNCTIONS = ("increase", "rate", "avg_over", "max_over", "min_over", "ever_max")
PLAIN_FUNCTIONS = {"abs": abs, "min": min, "max": max, "known": None}
_ALLOWED = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.Not,
    ast.USub,
    ast.UAdd,
    ast.BinOp,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.Compare,
    ast.Eq,
    ast.NotEq,
    ast.Lt,
    ast.LtE,
    ast.Gt,
    ast.GtE,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.Call,
    ast.IfExp,
)
log = logging.getLogger(__name__)

MAX_EXPRESSION_CHARS = 2000  # a rule's condition: a line or a few, not a program
MAX_EXPRESSION_DEPTH = 40
MAX_LITERAL_CHARS = 200  # string constants (label values to compare with)
MAX_NUMBER = 1e15
MAX_FORMAT_WIDTH = 64  # {value:>64} at most in a summary
Severity = Literal["critical", "warning", "info"]
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


class Expression:
    """A validated, compiled rule expression."""

    def __init__(self, text: str, kind: str, params: dict[str, Any]):
        self.text = text
        self.errors = 0  # evaluations that raised (counted; the first is logged)
        key = _key(text, kind, params)
        known = _ANALYSED.get(key)
        if known is None:
            self._analyse(text, kind, params)
            if len(_ANALYSED) >= 4096:
                _ANALYSED.clear()
            _ANALYSED[key] = tuple(getattr(self, name) for name in _ANALYSIS)
        else:  # the same text, kind and params were checked before (a config is checked, then used)
            for name, value in zip(_ANALYSIS, known, strict=True):
                setattr(self, name, value.copy() if isinstance(value, (set, dict, list)) else value)
        self._fn = None  # compiled alone when first evaluated alone; the engine compiles a kind's together

    def _analyse(self, text: str, kind: str, params: dict[str, Any]) -> None:
        if len(text) > MAX_EXPRESSION_CHARS:
            raise ValueError(f"too long ({len(text)} characters; at most {MAX_EXPRESSION_CHARS})")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as e:
            raise ValueError(f"syntax error at column {e.offset}: {e.msg}") from None
        except (RecursionError, MemoryError):
            raise ValueError(f"nested too deeply (at most {MAX_EXPRESSION_DEPTH} levels)") from None
        if _depth(tree) > MAX_EXPRESSION_DEPTH:
            raise ValueError(f"nested too deeply (at most {MAX_EXPRESSION_DEPTH} levels)")
        # old variable names work for one release: renamed here, reported by the rule
        renamed = _Rename({old: new for old, new in DEPRECATED.get(kind, {}).items() if old not in params})
        tree = renamed.visit(tree)
        self.deprecated: dict[str, str] = renamed.seen
        if renamed.seen:
            self.text = text = ast.unparse(tree)
        allowed_names = set(KINDS[kind]) | set(LABELS[kind]) | set(params) | {"True", "False", "None"}
        self.variables: set[str] = set()
        self.history_variables: set[str] = set()  # what increase(), avg_over()... look back at
        self.averaged: set[str] = set()  # what avg_over() looks back at: every sample counts
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED):
                raise ValueError(f"{type(node).__name__} is not allowed in a rule expression")
            if isinstance(node, ast.Constant):
                if isinstance(node.value, str) and len(node.value) > MAX_LITERAL_CHARS:
                    raise ValueError(f"a string constant is longer than {MAX_LITERAL_CHARS} characters")
                if (
                    isinstance(node.value, (int, float))
                    and not isinstance(node.value, bool)
                    and not (abs(node.value) <= MAX_NUMBER)
                ):
                    raise ValueError(f"a number is out of range (at most {MAX_NUMBER:g})")
            if isinstance(node, ast.Call):
                if not isinstance(node.func, ast.Name) or node.func.id not in (*HISTORY_FUNCTIONS, *PLAIN_FUNCTIONS):
                    raise ValueError(
                        f"unknown function in {ast.unparse(node)!r}; functions: "
                        f"{', '.join((*HISTORY_FUNCTIONS, *PLAIN_FUNCTIONS))}"
                    )
                if node.keywords:
                    raise ValueError(f"{node.func.id}() takes no keyword arguments")
                if node.func.id in HISTORY_FUNCTIONS:
                    self._check_history_call(node, kind, params)
                    self.history_variables.add(node.args[0].id)
                    if node.func.id == "avg_over":
                        self.averaged.add(node.args[0].id)
            elif isinstance(node, ast.Name) and node.id not in allowed_names | set(HISTORY_FUNCTIONS) | set(
                PLAIN_FUNCTIONS
            ):
                raise ValueError(
                    f"unknown name {node.id!r}{did_you_mean(node.id, allowed_names)}; `rigmon rules "
                    f"list` shows the {kind} variables, and this rule's params are "
                    f"{', '.join(sorted(params)) or 'none'}"
                )
            if isinstance(node, ast.Name) and node.id in KINDS[kind]:
                self.variables.add(node.id)
        args = _HistoryArgs(params)
        tree = _Params(params).visit(args.visit(tree))
        self.windows: list[float] = args.windows  # seconds each history function looks back
        # compiled once, to a function of straight-line Python with the three-valued logic
        # inline: the rule's params are constants in its code, each variable it reads is a local
        # taken from the entity's values (None, unknown, where they lack it), and its
        # temporaries are locals too, so an evaluation reads the values and writes nothing
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        self.reads: tuple[str, ...] = tuple(sorted(names & (set(KINDS[kind]) | set(LABELS[kind]))))
        self.body = _Inline().expression(tree.body)  # Python source, reading the variables as locals

    @staticmethod
    def _check_history_call(node: ast.Call, kind: str, params: dict[str, Any]) -> None:
        want = 1 if node.func.id == "ever_max" else 2
        if len(node.args) != want:
            raise ValueError(f"{node.func.id}() takes {want} argument{'s' if want > 1 else ''}")
        var = node.args[0]
        if not isinstance(var, ast.Name) or var.id not in KINDS[kind]:
            raise ValueError(f"the first argument of {node.func.id}() must be a {kind} variable")
        if want == 2:
            window = node.args[1]
            if isinstance(window, ast.Name) and window.id in params:
                parse_duration(params[window.id])
            elif isinstance(window, ast.Constant):
                parse_duration(window.value)
            else:
                raise ValueError(f"the window of {node.func.id}() must be seconds, a duration or a param")

    def evaluate(self, names: dict[str, Any], history: Any = None) -> Any:
        """The value: True, False, a number, or None (unknown) where a value it needs is missing
        or the evaluation failed: a failure is unknown for this rule only, counted, logged once.
        ``history`` is what increase(), rate()… ask (else ``names["_h"]``; none: unknown)."""
        if self._fn is None:
            self._fn = batch([self])
        return self._fn(names, names.get("_h") if history is None else history)[0]

    def failed(self, error: Exception) -> None:
        """An evaluation raised what an unknown term does not (MemoryError, OverflowError…):
        counted, logged once, unknown; never the other rules'."""
        self.errors += 1
        if self.errors == 1:
            log.error("rule expression %r failed (%s); it counts as unknown", self.text[:80], type(error).__name__)

    def terms(self) -> list[tuple[str, set[str]]]:
        """The comparisons, calls and bare variables the condition joins with and/or/not, each
        with the variables it reads (for doctor: which parts can evaluate on a machine).
        known() is no term: it always evaluates."""
        tree = ast.parse(self.text.strip(), mode="eval")
        out = []

        def visit(node: ast.AST) -> None:
            if isinstance(node, ast.BoolOp):
                for value in node.values:
                    visit(value)
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                visit(node.operand)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "known":
                return
            else:
                names = _required(node) & self.variables
                names |= {
                    n.args[0].id
                    for n in ast.walk(node)
                    if isinstance(n, ast.Call)
                    and n.args
                    and isinstance(n.args[0], ast.Name)
                    and n.args[0].id in self.history_variables
                }
                out.append((ast.unparse(node), names))

        visit(tree.body)
        return out

    def can_be_true(self, missing: set[str]) -> bool:
        """Whether the condition can ever hold when the ``missing`` variables are never given:
        ``a and b`` cannot if either cannot, ``a or b`` can if either can (for doctor)."""

        def visit(node: ast.AST) -> tuple[bool, bool]:  # (can be true, can be false)
            if isinstance(node, ast.BoolOp):
                parts = [visit(v) for v in node.values]
                if isinstance(node.op, ast.And):
                    return all(t for t, _ in parts), any(f for _, f in parts)
                return any(t for t, _ in parts), all(f for _, f in parts)
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                true, false = visit(node.operand)
                return false, true
            names = _required(node)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "known":
                return (False, True) if names & missing else (True, True)
            return (False, False) if names & missing else (True, True)

        return visit(ast.parse(self.text.strip(), mode="eval").body)[0]


def _required(node: ast.AST) -> set[str]:
    """The names ``node`` needs to evaluate: all it reads, but for one an ``x if known(x) else
    y`` stands in for where it is missing (a threshold the hardware may not give)."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    optional = {
        test.args[0].id
        for n in ast.walk(node)
        if isinstance(n, ast.IfExp)
        and isinstance(test := n.test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "known"
        and test.args
        and isinstance(test.args[0], ast.Name)
    }
    return names - optional - {"known"}


def batch(expressions: list[Expression]) -> Callable[[dict, Any], tuple]:
    """Expressions of one kind compiled into one function of an entity's values and history,
    answering a tuple of their values in order: each variable any of them reads is taken from
    the values once (None, unknown, where they lack it), and each expression fails alone: a
    TypeError or ZeroDivisionError is unknown, anything else unknown and counted by its own
    ``failed``. A temporary (``_v1``…) is assigned before it is read within its own
    expression, so the expressions share those names safely; the function writes nothing."""
    reads = sorted(set().union(*(e.reads for e in expressions)))
    lines = ["def _batch(_d, _h):", *(f"    {name} = _d.get({name!r})" for name in reads)]
    for k, e in enumerate(expressions):
        lines += [
            "    try:",
            f"        _r{k} = {e.body}",
            "    except _unknown:",
            f"        _r{k} = None",
            "    except _Exception as _e:",
            f"        _r{k} = _failed[{k}](_e)",
        ]
    lines.append("    return (" + "".join(f"_r{k}, " for k in range(len(expressions))) + ")")
    namespace = dict(
        _GLOBALS, _failed=[e.failed for e in expressions], _unknown=(TypeError, ZeroDivisionError), _Exception=Exception
    )
    source = "\n".join(lines) + "\n"
    code = _COMPILED.get(source)
    if code is None:
        if len(_COMPILED) >= 4096:
            _COMPILED.clear()
        code = _COMPILED[source] = generated.compiled(source, "<rules>")
    exec(code, namespace)  # checked expressions only
    return namespace["_batch"]


# What checking an expression finds depends on its text, kind and params alone, and so does the
# code a batch compiles to: both are kept (bounded), so a config that is checked and then used,
# or read again on a reload, does not parse and compile every rule twice.
_ANALYSIS = ("text", "deprecated", "variables", "history_variables", "averaged", "windows", "reads", "body")
_ANALYSED: dict[tuple, tuple] = {}
_COMPILED: dict[str, Any] = {}


def _key(text: str, kind: str, params: dict[str, Any]) -> tuple:
    return text, kind, repr(sorted(params.items()))


def analysed(specs) -> dict[tuple, tuple]:
    """What checking the rules' expressions found, as plain data: handed with a validated config
    (``rigmon.config.settings``) to ``remember`` in the process that runs it, which then compiles them
    without parsing them again. Only the expressions checked in this process are in it."""
    found = {}
    for spec in specs:
        for text in (spec.when, spec.clear, *spec.values.values()):
            if text:
                key = _key(text, spec.kind, spec.params)
                if key in _ANALYSED:
                    found[key] = _ANALYSED[key]
    return found


def remember(found: dict[tuple, tuple]) -> None:
    """Take what ``analysed`` gave, from the validation of this config (bounded as the rest)."""
    if len(_ANALYSED) + len(found) > 4096:
        _ANALYSED.clear()
    _ANALYSED.update(found)


# What the compiled expressions call (the logic and comparisons are inline, see _Inline):
# arithmetic that is unknown for an unknown term, never builds a huge string, and is unknown
# rather than an error on a division by zero or an overflow.
_OPERATORS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}
_OPERATOR_NAMES = {op: f"_op_{op.__name__}" for op in _OPERATORS}


def _arithmetic(fn):
    def apply(a, b):
        if a is None or b is None:
            return None
        if isinstance(a, str) or isinstance(b, str):
            return None  # 'a' * 10**11 would build a 100 GB string: text only compares
        try:
            return fn(a, b)
        except (ZeroDivisionError, OverflowError):
            return None

    return apply


def _plain(fn):
    def call(*args):
        return None if any(a is None for a in args) else fn(*args)

    return call


_KLEENE: dict[str, Any] = {
    **{name: _arithmetic(_OPERATORS[op]) for op, name in _OPERATOR_NAMES.items()},
    "_abs": _plain(abs),
    "_min": _plain(min),
    "_max": _plain(max),
}


_GLOBALS = {"__builtins__": {}, **_KLEENE}


class _Inline:
    """A checked expression as Python source with Kleene logic inline: an unknown (None) value
    makes only its own term unknown, ``True or unknown`` is true, ``False and unknown`` is false.
    Intermediate values live in ``_v1``, ``_v2``…, locals of the rule's function."""

    def __init__(self):
        self._n = 0

    def _tmp(self) -> str:
        self._n += 1
        return f"_v{self._n}"

    def expression(self, node: ast.AST) -> str:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            raise ValueError(f"{type(node).__name__} is not allowed in a rule expression")
        return method(node)

    def _Constant(self, node: ast.Constant) -> str:  # noqa: N802
        return repr(node.value)

    def _Name(self, node: ast.Name) -> str:  # noqa: N802
        return node.id

    def _BoolOp(self, node: ast.BoolOp) -> str:  # noqa: N802
        text = self.expression(node.values[0])
        for value in node.values[1:]:
            p, q = self._tmp(), self._tmp()
            right = self.expression(value)
            if isinstance(node.op, ast.And):
                text = (
                    f"(False if (({p} := {text}) is not None and not {p}) else False if (({q} := {right}) is not "
                    f"None and not {q}) else None if {p} is None or {q} is None else True)"
                )
            else:
                text = (
                    f"(True if (({p} := {text}) is not None and {p}) else True if (({q} := {right}) is not None "
                    f"and {q}) else None if {p} is None or {q} is None else False)"
                )
        return text

    def _UnaryOp(self, node: ast.UnaryOp) -> str:  # noqa: N802
        v = self._tmp()
        op = {ast.Not: "not ", ast.USub: "-", ast.UAdd: "+"}[type(node.op)]
        return f"(None if ({v} := {self.expression(node.operand)}) is None else {op}{v})"

    def _BinOp(self, node: ast.BinOp) -> str:  # noqa: N802
        return f"{_OPERATOR_NAMES[type(node.op)]}({self.expression(node.left)}, {self.expression(node.right)})"

    def _Compare(self, node: ast.Compare) -> str:  # noqa: N802
        operands = [node.left, *node.comparators]
        names = [self._tmp() for _ in operands]
        unknown = " or ".join(f"({v} := {self.expression(o)}) is None" for v, o in zip(names, operands, strict=True))
        symbols = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
        chain = names[0] + "".join(f" {symbols[type(op)]} {v}" for op, v in zip(node.ops, names[1:], strict=True))
        return f"(None if {unknown} else {chain})"

    def _IfExp(self, node: ast.IfExp) -> str:  # noqa: N802
        c = self._tmp()
        return (
            f"(None if ({c} := {self.expression(node.test)}) is None else "
            f"({self.expression(node.body)} if {c} else {self.expression(node.orelse)}))"
        )

    def _Call(self, node: ast.Call) -> str:  # noqa: N802
        name = node.func.id
        if name == "known":
            return f"(({self.expression(node.args[0])}) is not None)"
        if name in HISTORY_FUNCTIONS:
            # a history function asks the entity's history (the engine's, ``_h``); without one
            # (an expression evaluated on values alone) it is unknown
            args = ", ".join(self.expression(a) for a in node.args)
            return f"(None if _h is None else _h.{name}({args}))"
        if name in PLAIN_FUNCTIONS:
            name = f"_{name}"
        return f"{name}({', '.join(self.expression(a) for a in node.args)})"


class _Params(ast.NodeTransformer):
    """A rule's params become constants in its code (windows were resolved before)."""

    def __init__(self, params: dict[str, Any]):
        self._params = params

    def visit_Name(self, node: ast.Name) -> ast.AST:  # noqa: N802
        if node.id in self._params:
            return ast.copy_location(ast.Constant(self._params[node.id]), node)
        return node


class _HistoryArgs(ast.NodeTransformer):
    """increase(pcie_replays, "5m") → increase("pcie_replays", 300.0): history functions get
    the variable's name and the window in seconds."""

    def __init__(self, params: dict[str, Any]):
        self._params = params
        self.windows: list[float] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in HISTORY_FUNCTIONS:
            args = [ast.Constant(node.args[0].id)]
            if len(node.args) > 1:
                window = node.args[1]
                value = self._params[window.id] if isinstance(window, ast.Name) else window.value
                args.append(ast.Constant(parse_duration(value)))
                self.windows.append(parse_duration(value))
            node.args = args
        return node


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]):
        self.names, self.seen = names, {}

    def visit_Name(self, node: ast.Name) -> ast.Name:  # noqa: N802
        new = self.names.get(node.id)
        if new is None:
            return node
        self.seen[node.id] = new
        return ast.copy_location(ast.Name(id=new, ctx=node.ctx), node)


_WARNED: set[tuple[str, str, str]] = set()


def did_you_mean(name: str, known) -> str:
    """ " (did you mean X?)" for the closest known name, or ""."""
    import difflib  # a mistake's suggestion: not imported by every start

    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def template_names(kind: str, params: dict, values: dict) -> set[str]:
    """What a summary, description or hint may name: the entity's variables and labels, the
    params, the named values, the ever_max_ of each variable, and the few the engine adds."""
    variables = set(KINDS[kind])
    return (
        variables
        | set(LABELS[kind])
        | set(params)
        | set(values)
        | {f"ever_max_{v}" for v in variables}
        | set(DEPRECATED.get(kind, {}))
        | {"for_seconds", "xid_meaning", "remap_state"}
    )


def _warn_deprecated(rule: str, field: str, old: str, new: str) -> None:
    if (rule, field, old) not in _WARNED:  # once per rule and name, however often the config is validated
        _WARNED.add((rule, field, old))
        log.warning(
            "rule %s: %s: variable %r is deprecated and goes in the next release; use %r", rule, field, old, new
        )


def _depth(tree: ast.AST) -> int:
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack += [(child, depth + 1) for child in ast.iter_child_nodes(node)]
    return deepest


def check_template(
    text: str, field: str, params: dict | None = None, names: set[str] | None = None, plain: bool = False
) -> None:
    """Summary and description templates: ``{name}`` and ``{name:format}`` only, with a bounded
    width; no attribute or index access, no conversions, no nested fields. ``plain``: ``{name}``
    only (a headline names labels, which are text)."""
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as e:
        raise ValueError(f"{field}: {e}") from None
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if not name.isidentifier():
            raise ValueError(f"{field}: {{{name}}}: only a plain name may stand in braces")
        if names is not None and name not in names:
            raise ValueError(f"{field}: {{{name}}}: unknown name{did_you_mean(name, names)}")
        if conversion:
            raise ValueError(f"{field}: {{{name}!{conversion}}}: conversions are not allowed")
        if spec and plain:
            raise ValueError(f"{field}: {{{name}:{spec}}}: a label is text: {{{name}}} alone")
        if spec and ("{" in spec or any(int(w) > MAX_FORMAT_WIDTH for w in re.findall(r"\d+", spec))):
            raise ValueError(f"{field}: {{{name}:{spec}}}: widths and precisions go up to {MAX_FORMAT_WIDTH}")
        if spec and params is not None and name in params:
            try:
                format(params[name], spec)
            except Exception as e:  # {p:c} of 10**9, {p:d} of 0.5: it would never render
                raise ValueError(f"{field}: {{{name}:{spec}}} cannot format {name} = {params[name]!r}: {e}") from None


class Rule:
    """A rule ready to evaluate."""

    def __init__(self, spec):  # a specs.RuleSpec, or its rigmon.config.settings view
        self.spec = spec
        self.name = spec.name
        self.kind = spec.kind
        self.severity = spec.severity
        self.for_seconds = spec.for_
        self.params = dict(spec.params)
        self.when = Expression(spec.when, spec.kind, spec.params)
        self.clear = Expression(spec.clear, spec.kind, spec.params) if spec.clear else None
        self.values = {name: Expression(text, spec.kind, spec.params) for name, text in spec.values.items()}
        self.inhibits = spec.inhibits
        self.failures = 0  # evaluations of this rule that raised (the engine skips it there and goes on)

    @property
    def _expressions(self) -> list[Expression]:
        return [self.when, *([self.clear] if self.clear else []), *self.values.values()]

    @property
    def variables(self) -> set[str]:
        return self.when.variables | (self.clear.variables if self.clear else set())

    @property
    def history_variables(self) -> set[str]:
        return set().union(*(e.history_variables for e in self._expressions))

    @property
    def averaged(self) -> set[str]:
        return set().union(*(e.averaged for e in self._expressions))

    @property
    def shortest_window(self) -> float | None:
        return min((w for e in self._expressions for w in e.windows), default=None)

    @property
    def longest_window(self) -> float:
        return max((w for e in self._expressions for w in e.windows), default=0.0)

    def __repr__(self) -> str:
        return f"<Rule {self.name} ({self.severity})>"


def compile_rules(alerts) -> list[Rule]:
    """The rules of a config's ``[alerts]`` section (pydantic's or its plain settings), compiled;
    what its validation found already (``analysed``, in the plain settings) is not worked out again."""
    found = getattr(alerts, "analysed", None)
    if found:
        remember(found)
    return [Rule(spec) for spec in alerts.effective_rules()]
