"""What a rule says, as a TOML table: pydantic's models for the config's rules and the changes
to built-in ones, and the merge of both into the effective list. Validated when a config
loads; ``rigmon.alerts.rules`` compiles them into rules ready to evaluate."""

from __future__ import annotations

import ast
import copy
import functools
import math
import string
import tomllib
from importlib import resources
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, ValidationError, model_validator

from ..model.durations import format_duration, parse_duration
from .entities import DEPRECATED, LABELS, inhibit_scope
from .rules import Expression, Severity, _warn_deprecated, check_template, did_you_mean, template_names

# Seconds, or a string like "30s", "10m", "1h30m"; written back (JSON and TOML) as the string.
Duration = Annotated[
    float, BeforeValidator(parse_duration), PlainSerializer(format_duration, return_type=str, when_used="json")
]


def _param(value: Any) -> Any:
    """A threshold: a number or true/false, said in one line (not pydantic's three)."""
    if isinstance(value, bool) or (isinstance(value, (int, float)) and math.isfinite(value)):
        return value
    raise ValueError("a param is a number or true/false")


Param = Annotated[float | int | bool, BeforeValidator(_param)]


class RuleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False)

    name: Annotated[
        str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$", description="The alert's name.", examples=["GpuHot"])
    ]
    kind: Annotated[
        Literal["gpu", "gpu_fan", "fan", "cpu", "host", "psu", "sensor"],
        Field(description="What it watches: every entity of this kind.", examples=["gpu"]),
    ]
    when: Annotated[
        str,
        Field(
            description="Fires while this is true (rigmon rules list shows the variables).",
            examples=["temperature_celsius >= limit_celsius"],
        ),
    ]
    clear: Annotated[
        str | None,
        Field(
            description="Resolves only when this is true (default: when 'when' is false).",
            examples=["temperature_celsius < limit_celsius - 5"],
        ),
    ] = None
    for_: Annotated[Duration, Field(alias="for", description="How long 'when' must hold before it fires.")] = 0.0
    severity: Annotated[Severity, Field(description="How bad it is.", examples=["warning"])]
    summary: Annotated[
        str,
        Field(
            description="One line; {gpu}, {value} and the variables are filled in.",
            examples=["GPU {gpu} at {temperature_celsius:.0f} °C"],
        ),
    ]
    headline: Annotated[
        str,
        Field(
            description="Alertmanager's summary: words over the labels and {instance} only, as a PromQL "
            "rule's (the summary goes as its detail). Empty: the summary.",
            examples=["GPU {gpu} on {instance} running hot"],
        ),
    ] = ""
    description: Annotated[str, Field(description="More about what it means.")] = ""
    hint: Annotated[str, Field(description="What to do about it.")] = ""
    params: Annotated[
        dict[str, Param], Field(description="Thresholds, named in the expressions.", examples=[{"limit_celsius": 83}])
    ] = {}
    values: Annotated[
        dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str],
        Field(
            description="Named expressions computed when the alert fires, for the summary and description.",
            examples=[{"over_by": "temperature_celsius - limit_celsius"}],
        ),
    ] = {}
    enabled: Annotated[bool, Field(description="Evaluate this rule.")] = True
    inhibits: Annotated[
        tuple[Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")], ...],
        Field(
            description="Rules this one supersedes, of its own kind or the box's (host), or a GPU fan's GPU, or a "
            "fan's CPUs: while it fires on an entity, theirs on that entity (or on the box, the fan's "
            "GPU, every CPU) are held back (one event, one page).",
            examples=[["GpuNearSlowdown"]],
        ),
    ] = ()

    @model_validator(mode="after")
    def _expressions(self) -> RuleSpec:
        """Every problem of the rule's expressions, texts and params at once (one a line)."""
        problems = [
            f"params.{name}: {why}" for name, value in self.params.items() if (why := param_problem(name, value))
        ]
        try:
            self._check_expressions()
        except ValueError as e:
            problems.append(str(e))
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _check_expressions(self) -> None:
        old = DEPRECATED.get(self.kind, {})
        names = template_names(self.kind, self.params, self.values)
        check_template(self.headline, "headline", names=set(LABELS[self.kind]) | {"instance"}, plain=True)
        for field in ("summary", "description", "hint"):
            check_template(getattr(self, field), field, self.params, names)
            for _, name, _, _ in string.Formatter().parse(getattr(self, field)):
                if name in old and name not in self.params and name not in self.values:
                    _warn_deprecated(self.name, field, name, old[name])
        named = [("when", self.when), ("clear", self.clear)] + [(f"values.{k}", v) for k, v in self.values.items()]
        used: set[str] = set()
        for field, text in named:
            if text is not None:
                try:
                    expression = Expression(text, self.kind, self.params)
                except ValueError as e:
                    raise ValueError(f"{field}: {e}") from None
                for name, new in expression.deprecated.items():
                    _warn_deprecated(self.name, field, name, new)
                used |= {n.id for n in ast.walk(ast.parse(text.strip(), mode="eval")) if isinstance(n, ast.Name)}
        for field in ("summary", "description"):
            used |= {name for _, name, _, _ in string.Formatter().parse(getattr(self, field)) if name}
        for param in sorted(set(self.params) - used):  # a misspelt threshold leaves the one it meant in force
            raise ValueError(
                f"params.{param}: no condition, value or text of the rule reads it{did_you_mean(param, used)}"
            )


class RuleOverride(BaseModel):
    """Changes to a built-in rule: turn it off, re-threshold it, or rewrite it."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False)

    enabled: Annotated[bool | None, Field(description="false turns the rule off.", examples=[False])] = None
    when: Annotated[str | None, Field(description="A new condition.")] = None
    clear: Annotated[str | None, Field(description="A new resolve condition.")] = None
    for_: Annotated[Duration | None, Field(alias="for", description="A new waiting time.", examples=["1m"])] = None
    severity: Annotated[Severity | None, Field(description="A new severity.")] = None
    summary: Annotated[str | None, Field(description="A new summary.")] = None
    headline: Annotated[str | None, Field(description="A new headline.")] = None
    description: Annotated[str | None, Field(description="A new description.")] = None
    hint: Annotated[str | None, Field(description="A new hint.")] = None
    params: Annotated[dict[str, Param] | None, Field(description="New thresholds; the others keep their values.")] = (
        None
    )
    values: Annotated[
        dict[str, str] | None, Field(description="New or changed named expressions for the summary; the others stay.")
    ] = None
    inhibits: Annotated[
        tuple[str, ...] | None, Field(description="A new list of the rules it supersedes.", examples=[[]])
    ] = None


# What a threshold means, from its name, as the built-ins name theirs: a share of something is
# 0-1 (min_power_ratio, sw_clock_share, idle_utilization, far_below, min_target); a margin is
# never below 0; a window is a time; a value in a unit (limit_celsius) lies within what a
# reading in that unit can be (the table of readings' ranges).
_SHARES = ("_ratio", "_share", "_utilization")
_SHARE_NAMES = {"far_below", "min_target"}
_TIMES = {"window"}
_UNITS = ("celsius", "watts", "hertz", "bytes", "rpm", "joules", "volts", "amperes")


def param_problem(name: str, value: float | int | bool) -> str | None:
    """What is wrong with a threshold's value for what its name says it is; None where nothing."""
    from ..model.validity import UNIT_RANGES

    if isinstance(value, bool):
        return None
    if name.endswith(_SHARES) or name in _SHARE_NAMES:
        return None if 0 <= value <= 1 else f"{value:g} is no share: a ratio is 0 to 1 (0.6 is 60 %)"
    if name in _TIMES or name.endswith("_seconds"):
        return None if value > 0 else f"{value:g} s is no time to look back over: above 0"
    if name.startswith("margin_") and value < 0:
        return f"{value:g} is no margin: 0 or more"
    unit = next((u for u in _UNITS if name.endswith(f"_{u}")), None)
    if unit is not None:
        low, high = UNIT_RANGES[unit]
        if not low <= value <= high:
            return f"{value:g} is outside what a reading in {unit} can be ({low:g} to {high:g})"
    if name.startswith(("max_", "min_")) and value < 0:
        return f"{value:g}: a count or a limit is 0 or more"
    return None


def builtin_specs() -> dict[str, dict]:
    return copy.deepcopy(_builtin_specs())


@functools.lru_cache(maxsize=1)
def _builtin_specs() -> dict[str, dict]:
    text = (resources.files("rigmon.alerts") / "builtin.toml").read_text(encoding="utf-8")
    return {rule["name"]: rule for rule in tomllib.loads(text)["rules"]}


def merge(overrides: dict[str, RuleOverride], custom: list[RuleSpec]) -> list[RuleSpec]:
    """Built-in rules with the config's overrides applied, then the user's own rules.
    Raises ValueError with the rule's name in the message on a conflict."""
    builtins = builtin_specs()
    unknown = set(overrides) - set(builtins)
    out: list[RuleSpec] = []
    problems: list[str] = []  # every problem at once: a misspelled name beside a wrong threshold
    if unknown:
        first = sorted(unknown)[0]
        problems.append(
            f"no built-in rule named {', '.join(sorted(unknown))}"
            + (did_you_mean(first, builtins) or ": rigmon rules list names them")
        )
    for name, raw in builtins.items():
        override = overrides.get(name)
        if override is not None:
            changes = override.model_dump(by_alias=True, exclude_none=True)
            for merged in ("params", "values"):
                if merged in changes:
                    changes[merged] = {**raw.get(merged, {}), **changes[merged]}
            raw = {**raw, **changes}
        try:
            out.append(RuleSpec.model_validate(raw))
        except ValidationError as e:  # every problem of every rule, not the first one's only
            for err in e.errors():
                field = ".".join(str(p) for p in err["loc"])
                for message in err["msg"].removeprefix("Value error, ").split("\n"):
                    problems.append(f"builtin.{name}{'.' + field if field else ''}: {message}")
    for spec in custom:
        if spec.name in builtins:
            problems.append(f"{spec.name} is a built-in rule: change it under [alerts.builtin.{spec.name}]")
        out.append(spec)
    if problems:
        raise ValueError("\n".join(problems))
    check_inhibits(out)
    return out


def check_inhibits(specs: list[RuleSpec]) -> None:
    """Each name a rule inhibits is another rule it can hold back (inhibit_scope); ValueError
    naming the field if not."""
    kinds = {spec.name: spec.kind for spec in specs}
    for spec in specs:
        where = f"builtin.{spec.name}" if spec.name in _builtin_specs() else spec.name
        for target in spec.inhibits:
            if target == spec.name:
                raise ValueError(f"{where}.inhibits: a rule cannot inhibit itself")
            if target not in kinds:
                raise ValueError(f"{where}.inhibits: no rule named {target}{did_you_mean(target, kinds)}")
            if inhibit_scope(spec.kind, kinds[target]) is None:
                raise ValueError(
                    f"{where}.inhibits: {target} watches {kinds[target]} entities, {spec.name} "
                    f"{spec.kind}: a rule inhibits only rules of its own kind, the box's (host), "
                    f"a GPU fan's GPU (gpu_fan on gpu) or a fan's CPUs (fan on cpu)"
                )
