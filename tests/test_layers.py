"""rigmon's modules read top-down: each imports only from its own layer or below, and no two
modules import each other, directly or round a circle. Read from the source's import
statements (those inside functions too), so a new arrow back up fails here in review."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "rigmon"

# lowest first; a module belongs to the longest prefix that names it. The folders are the
# layers: each package holds one, and its __init__ says what lives there and what it may import.
LAYERS = [
    ("model: a sample, the table of readings and the code made from it, units, recordings, text", ["rigmon.model"]),
    ("system: the heap, systemd's socket, logging", ["rigmon.system"]),
    ("readers: the hardware, live, recorded or replayed", ["rigmon.readers"]),
    ("alerts: the rule language and its engine (no I/O)", ["rigmon.alerts"]),
    ("config: validated (pydantic), and as the plain data that runs with it", ["rigmon.config"]),
    ("the poller: readers chosen by a config, into one sample", ["rigmon.poller"]),
    (
        "sinks and exporters: what each poll goes to (the alert sink and its notifiers, InfluxDB, the "
        "history, the ledger, what the box has had; the Prometheus families); status's table",
        ["rigmon.sinks", "rigmon.exporters", "rigmon.status"],
    ),
    ("composition: the pipeline every loop steps", ["rigmon.pipeline"]),
    ("http: the server, the page and its API, charts", ["rigmon.http"]),
    ("the daemon, the burn-in and the offline rules", ["rigmon.daemon", "rigmon.burnin", "rigmon.offline"]),
    ("commands: the command line", ["rigmon.commands", "rigmon.__main__"]),
]
PACKAGES = ["model", "system", "readers", "alerts", "config", "sinks", "exporters", "http", "burnin", "commands"]
TOP_MODULES = 8  # __init__ and __main__ included


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    edges = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    found.add(full if full in modules else target)
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        edges[name] = {m for m in found if m in modules and m not in (name, "rigmon")}
    return edges


def _layer(module: str) -> int:
    best = max(
        (
            (n, len(prefix))
            for n, (_, prefixes) in enumerate(LAYERS)
            for prefix in prefixes
            if module == prefix or module.startswith(prefix + ".")
        ),
        key=lambda x: x[1],
        default=None,
    )
    if best is None:
        pytest.fail(f"{module} is in no layer: add it to LAYERS")
    return best[0]


def test_no_module_imports_one_above_its_layer():
    modules = _modules()
    up = [
        f"{m} ({LAYERS[_layer(m)][0]}) imports {o} ({LAYERS[_layer(o)][0]})"
        for m, outs in sorted(_imports(modules).items())
        if m != "rigmon"
        for o in sorted(outs)
        if _layer(o) > _layer(m)
    ]
    assert up == [], "\n".join(up)


def test_no_import_circles():
    edges = _imports(_modules())
    circles, state = [], {}

    def visit(m, path):
        state[m] = "open"
        for o in sorted(edges[m]):
            if state.get(o) == "open":
                circles.append(" -> ".join(path[path.index(o) :] + [o]))
            elif o not in state:
                visit(o, path + [o])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert circles == [], "\n".join(circles)


def test_no_package_circles():
    """Packages too: alerts/ holds the rule language only, so the config can build on it while
    the alert sink (in sinks/) builds on the config."""

    def package(m):
        parts = m.split(".")
        return ".".join(parts[:2]) if len(parts) > 2 or _modules()[m].name == "__init__.py" else m

    modules = _modules()
    edges: dict[str, set[str]] = {}
    for m, outs in _imports(modules).items():
        edges.setdefault(package(m), set()).update(package(o) for o in outs if package(o) != package(m))
    back = sorted(f"{a} <-> {b}" for a in edges for b in edges[a] if a in edges.get(b, set()) and a < b)
    assert back == [], back


def test_the_folders_are_the_layers():
    """At most eight modules at the top; each package opens with what lives there and what it may
    import; the packages stand in the layers' order, lowest first."""
    top = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(top) <= TOP_MODULES, top
    packages = sorted(p.parent.name for p in ROOT.glob("*/__init__.py"))
    assert packages == sorted(PACKAGES)
    for name in PACKAGES:
        doc = ast.get_docstring(ast.parse((ROOT / name / "__init__.py").read_text()))
        assert doc and "May import:" in doc, f"rigmon/{name}/__init__.py says what it may import"
    order = [_layer(f"rigmon.{name}") for name in PACKAGES]
    assert order == sorted(order), "PACKAGES lists the packages lowest first"


def test_each_package_says_what_it_may_import_and_keeps_to_it():
    """What a package's docstring allows is what it imports (of rigmon's packages), no more."""
    modules = _modules()
    edges = _imports(modules)
    wrong = []
    for name in PACKAGES:
        doc = ast.get_docstring(ast.parse((ROOT / name / "__init__.py").read_text()))
        allowed = doc.split("May import:", 1)[1]
        if allowed.strip().startswith("everything"):
            continue
        for module, outs in edges.items():
            if not module.startswith(f"rigmon.{name}"):
                continue
            for other in outs:
                parts = other.split(".")
                if len(parts) < 2 or parts[1] == name:
                    continue
                if f"``{parts[1]}``" not in allowed and not (parts[1] == "pipeline" and "pipeline" in allowed):
                    wrong.append(f"{module} imports {other}: rigmon/{name}/__init__.py does not allow {parts[1]}")
    assert wrong == [], "\n".join(wrong)


def test_the_check_sees_an_arrow_back_up():
    """The graph is read from the source as it is: a low module that imports a high one is found."""
    modules = _modules()
    edges = _imports(modules)
    assert "rigmon.alerts.specs" in edges["rigmon.config.schema"]  # config is built on the rule language
    assert "rigmon.config.schema" in edges["rigmon.sinks.alerts"]
    assert _layer("rigmon.sinks.alerts") > _layer("rigmon.config.schema")
    assert _layer("rigmon.model.text") < _layer("rigmon.commands.status")
