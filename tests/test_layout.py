"""The house's structure, read from the source: no import circle (but inside the scripted
upstream of ``app.testing``), the core never imports the rooms above it, at most three
imports run from a lower floor to a higher one, and no module grows past 600 lines.

One job per module; 600 lines is a backstop, not a size to aim for. Imports are read with
:mod:`ast` (nothing is imported), those under ``if TYPE_CHECKING:`` counted too: an
annotation ties a module to the one it names as much as a call does.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Above the core: the admin API, the console, the command line, the composition root
#: and the process around it. Everything else in ``app`` (but the scripted upstream of
#: ``app.testing``) is the core: what decides and relays, readable and testable without
#: these rooms.
ABOVE = ("app.admin", "app.console", "app.cli", "app.main", "app.handlers", "app.demo", "app.demo_mcp",
         "app.startup", "app.server", "app.testing")
#: The backstop: a module past it does more than one job.
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The ``app`` modules ``path`` imports (module-level, in functions, or for annotations)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                for alias in child.names:
                    full = f"{target}.{alias.name}"
                    found.add(full if full in modules else target)
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    paths = sorted((ROOT / "app").rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _imports(p, modules) for p in paths}


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


#: Where import circles are allowed: the scripted upstream (test support, not the gateway).
CIRCLES_ALLOWED = ("app.testing",)


def test_no_import_circle() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 and not all(_within(m, CIRCLES_ALLOWED) for m in component):
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            connect(module)
    assert circles == []


def test_the_core_never_imports_the_rooms_above_it() -> None:
    upward = sorted(f"{m} -> {d}" for m, deps in _graph().items() if not _within(m, ABOVE)
                    for d in deps if _within(d, ABOVE))
    assert upward == []


def test_no_module_over_the_backstop() -> None:
    """Application, benchmark and test-support modules stay under :data:`MAX_LINES` (test
    files themselves are tables of cases and may run longer)."""
    paths = [*(ROOT / "app").rglob("*.py"), *(ROOT / "bench").rglob("*.py"),
             *(p for p in (ROOT / "tests").glob("*.py") if not p.name.startswith("test_"))]
    ours = [p for p in paths if not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    # (bench/.venv-litellm is LiteLLM's virtualenv, not ours)
    long = sorted(f"{p.relative_to(ROOT)}: {n}" for p in ours
                  if (n := len(p.read_text().splitlines())) > MAX_LINES)
    assert long == []


#: The core's floors, bottom first (docs/layout.md draws them): a module may import its own
#: floor and those below; the longest prefix names a module's floor. The guard's pure
#: verdicts sit under their storage (app.ledger: the tool-call ledger, conversations,
#: strikes), which admission writes in its transaction. The admission transaction (with its
#: outcomes and the reconciliation of its log) sits above budgets, which use admission's
#: pure rules (the ceiling decision, dollars, tokens), and above the settlement after the
#: exchange (app.settlement: the task's record, its budget windows, the spend record). What
#: one relayed exchange reports (app.proxy.outcome: pure values over the wire's summary)
#: sits at the bottom, where the events that carry it are.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("app.wire", "app.db", "app.config", "app.task", "app.errors", "app.request_ids", "app.settings",
     "app.fault_log", "app.events", "app.client_caps", "app.stop_reasons", "app.proxy.outcome"),
    ("app.guard",),
    ("app.ledger",),
    ("app.admission",),
    ("app.budgets",),
    ("app.settlement",),
    ("app.admission.admission", "app.admission.outcomes", "app.admission.reconcile"),
    ("app.proxy", "app.app_state"),
    ("app.mcp",),  # the MCP gateway: the proxy's inbound checks and token lookup, admission's rules
    ("app.jobs", "app.retention"),
)
#: Upward imports the house allows (at most 3): settings validates two knobs with their
#: owners' parsers (the regex check of the result normalisers, the endpoint allowlist).
#: The input anchor's I/O lives in admission (app.admission.anchor_rows), not guard (issue 18).
UPWARD = {
    "app.settings -> app.guard.normalize",
    "app.settings -> app.proxy.endpoints",
}


def _floor(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, floor): the longest prefix decides
    for level, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            if _within(module, (prefix,)) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), level)
    return None if best is None else best[1]


def test_the_core_imports_only_down_its_floors() -> None:
    graph = _graph()
    core = [m for m in graph if m.startswith("app.") and not _within(m, ABOVE)]
    assert [m for m in core if _floor(m) is None] == []  # every core module has a floor
    upward = {f"{m} -> {d}" for m in core for d in graph[m]
              if (low := _floor(m)) is not None and (high := _floor(d)) is not None and high > low}
    assert upward == UPWARD
    assert len(UPWARD) <= 3
