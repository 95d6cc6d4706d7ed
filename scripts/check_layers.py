"""The layer rule and the no-cycle rule for ``gateway/``, checked from the source.

Run ``python3 scripts/check_layers.py``: it prints every crossing and every import cycle
and exits 1 when there is one. ``tests/unit/test_layers.py`` runs the same check, so CI
fails on a crossing.

The layers, innermost first (``docs/architecture.md`` draws them):

- ``protocol``: the sans-IO core. Imports the standard library, orjson and ``errors``.
  (ruff's TID251 also bans anyio, Starlette and uvicorn there.)
- ``stdio``: child processes. Imports ``protocol`` and ``errors``.
- ``relay``: router, exchange, sessions, suspensions, listens, catalog, owner identity.
  Imports ``stdio``, ``protocol``, ``errors`` and the pure ``oauth.policy``.
- ``ops``: metrics, logs, recent warnings. Reads the relay layer at scrape time.
- ``http``: the Starlette edge. Imports ``relay``, ``ops``, ``oauth``, ``protocol`` and
  ``errors``, never ``stdio``.
- the composition root (``cli``, ``config``, ``configfile``, ``settings``, ``server``, ``workers``,
  ``helptext``, ``reference``, ``__main__``): imports anything; nothing below imports it.
- ``tools``: the ``call`` client, ``inspect`` and the demo server, which share the package
  but not the gateway's layers: ``protocol``, ``stdio``, ``errors``, ``helptext``.

``gateway/protocol/`` is also checked for purity: no I/O, concurrency or clock module
(``IO_MODULES``), no ``async def`` and no ``await``.

All of ``gateway/`` is checked for tasks without an owner and locks held across a wait
(``unowned_tasks``, issue #27): a task group is made only as an ``async with`` item (never
``create_task_group()`` kept to be entered later) and never entered by hand
(``tg.__aenter__()``); no task is started with ``create_task`` or ``ensure_future`` and its
handle dropped; no ``async with`` of a lock (``self._lock``, ``anyio.Lock()``, a semaphore or
limiter) awaits or yields inside. An object that owns a task group runs it in an ``async
with`` of its own (``Pool._run``, ``RunningPools.running``) and, when it is itself a context
manager, enters that one.

Every import counts, also one inside a function (a function-local import that hides a cycle
is still a cycle); only imports under ``if TYPE_CHECKING:`` are left out.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "gateway"

COMPOSITION = frozenset(
    {"cli", "config", "configfile", "settings", "server", "workers", "helptext", "reference", "__main__"}
)

# layer -> the layers it may import (itself always allowed)
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "protocol": frozenset({"errors"}),
    "stdio": frozenset({"protocol", "errors"}),
    "oauth": frozenset({"errors"}),
    "relay": frozenset({"stdio", "protocol", "errors", "oauth.policy"}),
    "ops": frozenset({"relay", "stdio", "protocol", "errors"}),
    "http": frozenset({"relay", "ops", "oauth", "protocol", "errors", "package"}),
    "tools": frozenset({"protocol", "stdio", "errors", "helptext", "package"}),
    "composition": frozenset(
        {"errors", "protocol", "stdio", "oauth", "relay", "ops", "http", "tools", "package", "composition"}
    ),
    "package": frozenset(),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "package"  # gateway/__init__.py: the version
    head = parts[1]
    if head in COMPOSITION:
        return "composition"
    if head == "errors":
        return "errors"
    return head


def allowed(source: str, target: str) -> bool:
    src, dst = layer_of(source), layer_of(target)
    if src == dst:
        return True
    rules = ALLOWED[src]
    if dst in rules:
        return True
    # a rule may name one module of another layer ("oauth.validation", "helptext")
    return any(target == f"gateway.{rule}" or target.startswith(f"gateway.{rule}.") for rule in rules)


def _type_checking_blocks(tree: ast.Module) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                for inner in ast.walk(child):
                    skipped.add(id(inner))
    return skipped


def imports_of(path: Path, modules: set[str]) -> Iterator[tuple[int, str]]:
    """(line, imported gateway module) for every import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_blocks(tree)
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gateway"):
                    yield node.lineno, _known(alias.name, modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if not base.startswith("gateway"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield node.lineno, candidate if candidate in modules else _known(base, modules)


def _known(name: str, modules: set[str]) -> str:
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name


def graph() -> dict[str, list[tuple[int, str]]]:
    files = {module_name(p): p for p in sorted(ROOT.rglob("*.py")) if "__pycache__" not in p.parts}
    modules = set(files)
    return {name: sorted(set(imports_of(path, modules))) for name, path in files.items()}


def crossings(edges: dict[str, list[tuple[int, str]]]) -> list[str]:
    found = []
    for source, targets in edges.items():
        for line, target in targets:
            if target != source and not allowed(source, target):
                found.append(f"{source}:{line} imports {target} ({layer_of(source)} may not import {layer_of(target)})")
    return found


def strip_line(crossing: str) -> str:
    """ "a:12 imports b (why)" -> "a imports b": a crossing named without its line number."""
    where, _, rest = crossing.partition(" imports ")
    return f"{where.partition(':')[0]} imports {rest.partition(' ')[0]}"


def cycles(edges: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for _, target in edges.get(node, []):
            # a package's __init__ importing its own modules is not a cycle worth naming
            if target == node or target not in edges:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


IO_MODULES: frozenset[str] = frozenset(
    {
        "anyio",
        "asyncio",
        "trio",
        "sniffio",
        "socket",
        "ssl",
        "select",
        "selectors",
        "subprocess",
        "threading",
        "multiprocessing",
        "time",
        "os",
        "http",
        "urllib",
        "httpx",
        "starlette",
        "uvicorn",
        "sse_starlette",
    }
)
"""What ``gateway/protocol/`` may not import: I/O, concurrency and the clock (the clock is
passed in as a number). ruff's TID251 bans anyio, Starlette and uvicorn there too."""


def impurities(root: Path = ROOT) -> list[str]:
    """``gateway/protocol/`` stays sans-IO: no I/O or clock module, no ``async def``, no ``await``."""
    found = []
    for path in sorted((root / "protocol").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where = module_name(path) if root == ROOT else path.stem
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, (ast.AsyncFunctionDef, ast.Await, ast.AsyncFor, ast.AsyncWith)):
                found.append(f"{where}:{node.lineno} is async (gateway.protocol is sans-IO)")
                continue
            else:
                continue
            for name in names:
                if name.split(".")[0] in IO_MODULES:
                    found.append(f"{where}:{node.lineno} imports {name} (gateway.protocol is sans-IO)")
    return found


TASK_GROUP_NAME = re.compile(r"(?:^|_)(?:tg|task_group|group)$")
"""What a task group held in a variable or attribute is called (``tg``, ``self._task_group``)."""
SPAWNS = frozenset({"create_task", "ensure_future"})
LOCK_NAME = re.compile(r"(?i)(?:lock|semaphore|limiter|mutex)$")
"""What an async lock held in a variable or attribute is called."""


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _names_task_group(node: ast.expr) -> bool:
    if isinstance(node, ast.Call):
        return _called(node) == "create_task_group"
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return bool(TASK_GROUP_NAME.search(name))


def _names_lock(node: ast.expr) -> bool:
    """``self._lock``, ``lock``, ``anyio.Lock()``, ``limiter`` (a semaphore or capacity limiter too)."""
    if isinstance(node, ast.Call):
        return _called(node) in ("Lock", "Semaphore", "CapacityLimiter", "Condition")
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return bool(LOCK_NAME.search(name))


def _waits(body: list[ast.stmt]) -> bool:
    """Whether ``body`` awaits or yields (not counting functions defined in it)."""
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Await, ast.Yield, ast.YieldFrom, ast.AsyncFor, ast.AsyncWith)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            pending.extend(ast.iter_child_nodes(node))
    return False


def unowned_tasks(root: Path = ROOT) -> list[str]:
    """Tasks and task groups without an owner, and locks held across a wait, anywhere in
    ``root`` (the module docstring); in each file by line."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where = module_name(path) if root == ROOT else path.relative_to(root).with_suffix("").as_posix()
        withs = [node for node in ast.walk(tree) if isinstance(node, ast.AsyncWith)]
        in_async_with = {id(item.context_expr) for node in withs for item in node.items}
        dropped = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
        problems = [
            (held.lineno, "holds a lock across an await (decide under it, wait after)")
            for held in withs
            if any(_names_lock(item.context_expr) for item in held.items) and _waits(held.body)
        ]
        for node in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            called = _called(node)
            if called == "create_task_group" and id(node) not in in_async_with:
                problems.append((node.lineno, "makes a task group outside `async with` (enter it there)"))
            elif called in ("__aenter__", "__aexit__") and isinstance(node.func, ast.Attribute):
                if _names_task_group(node.func.value):
                    problems.append((node.lineno, f"enters a task group by hand ({called}; use `async with`)"))
            elif called in SPAWNS and id(node) in dropped:
                problems.append((node.lineno, f"starts a task nobody holds ({called}; start it in a task group)"))
        found += [f"{where}:{line} {problem}" for line, problem in sorted(problems)]
    return found


def main() -> int:
    edges = graph()
    problems = crossings(edges) + [" -> ".join(cycle) + " (import cycle)" for cycle in cycles(edges)] + impurities()
    problems += unowned_tasks()
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
