"""The floors of the package, checked from the source (docs/architecture.md):

* the compiled core (pyx/) imports only the leaves (errors, limits, record_format, storage.group_commit, storage.sync_mode) and other
  compiled modules — never its Python twin, never a module above it;
* the twins (journal_engine/_twin/) import only the leaves and each other;
* the leaves import only each other;
* data flows one way: broker -> message_store -> storage (the protocol and the shared parts) -> the backends
  (storage/journal/, storage/lmdb/) -> files, never back, and the broker never reaches storage;
* each backend imports the storage floor and never the other backend; the floor's shared modules import
  no backend (only ``storage.directory_kind``, which tells them apart by their files, names both);
* inside the broker, four floors (journal_engine/broker/__init__.py): artemis/ <- the common model <- the
  seed systems (classic/, qpid/, hornetq/) and config/ <- the engine; no floor imports one above it;
* there is no import cycle anywhere in journal_engine, counting imports inside functions and under
  TYPE_CHECKING.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from locations import ROOT

pytestmark = pytest.mark.same_on_both   # read from the source

PACKAGE = ROOT / "journal_engine"
PYX = ROOT / "pyx" / "journal_engine"
LEAVES = {"journal_engine.errors", "journal_engine.limits", "journal_engine.record_format", "journal_engine.storage.group_commit",
          "journal_engine.storage.sync_mode",
          "journal_engine.storage"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "pyx":
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def python_modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def compiled_modules() -> dict[str, Path]:
    return {module_name(path): path for path in PYX.glob("*.pyx")}


ALL_MODULES = {**python_modules(), **compiled_modules()}


def resolve(importer: str, is_package: bool, level: int, module: str | None, names: list[str]) -> set[str]:
    """The journal_engine modules an import statement loads (a submodule when a name is one)."""
    if level:
        base = importer.split(".") if is_package else importer.split(".")[:-1]
        base = base[:len(base) - (level - 1)]
        target = ".".join(base + ([module] if module else []))
    else:
        target = module or ""
    if not target.startswith("journal_engine"):
        return set()
    found = set()
    for name in names:
        if f"{target}.{name}" in ALL_MODULES:
            found.add(f"{target}.{name}")
        elif target in ALL_MODULES:
            found.add(target)
    if not names and target in ALL_MODULES:
        found.add(target)
    return found


def python_imports(name: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found |= resolve(name, is_package, node.level, node.module, [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found |= resolve(name, is_package, 0, alias.name, [])
    return found


_PYX_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import\s+\(?([\w, \n]+)|c?import\s+([\w.]+))", re.M)


def compiled_imports(name: str, path: Path) -> set[str]:
    found = set()
    for match in _PYX_IMPORT.finditer(path.read_text()):
        module, names, plain = match.groups()
        if plain:
            found |= resolve(name, False, 0, plain, [])
        else:
            listed = [n.split()[0] for n in names.replace("\n", ",").split(",") if n.strip()]   # "x as y" -> x
            found |= resolve(name, False, 0, module, listed)
    return found


GRAPH = {name: (compiled_imports(name, path) if path.suffix == ".pyx" else python_imports(name, path)) - {name}
         for name, path in ALL_MODULES.items()}


def test_the_graph_sees_the_whole_package():
    assert {"journal_engine._codec", "journal_engine._core", "journal_engine._replay",
            "journal_engine._record_writer"} <= set(compiled_modules())
    assert "journal_engine.broker.broker" in GRAPH and "journal_engine.storage.journal.journal" in GRAPH
    assert "journal_engine.errors" in GRAPH["journal_engine._core"]


@pytest.mark.parametrize("module", sorted(compiled_modules()))
def test_compiled_modules_import_only_leaves_and_compiled_modules(module):
    allowed = LEAVES | set(compiled_modules())
    assert GRAPH[module] <= allowed, f"{module} imports above the floor: {sorted(GRAPH[module] - allowed)}"


def test_twins_import_only_leaves_and_each_other():
    twins = {name for name in python_modules() if name.startswith("journal_engine._twin")}
    assert twins, "no twin package"
    for twin in twins:
        assert GRAPH[twin] <= LEAVES | twins, f"{twin} imports {sorted(GRAPH[twin] - LEAVES - twins)}"


def test_leaves_import_only_leaves():
    for leaf in LEAVES:
        assert GRAPH[leaf] <= LEAVES, f"{leaf} imports {sorted(GRAPH[leaf] - LEAVES)}"


@pytest.mark.parametrize("lower, upper", [
    ("journal_engine.storage", "journal_engine.message_store"),
    ("journal_engine.storage", "journal_engine.broker"),
    ("journal_engine.message_store", "journal_engine.broker"),
])
def test_data_flows_one_way(lower, upper):
    for name, imports in GRAPH.items():
        if name.startswith(lower + ".") or name == lower:
            wrong = sorted(i for i in imports if i == upper or i.startswith(upper + "."))
            assert not wrong, f"{name} (below) imports {wrong} (above)"


def test_the_broker_reaches_storage_only_through_the_store():
    """docs/architecture.md: the broker imports the leaves, message_store/ and _impl (never storage/ nor a compiled
    or twin module directly)."""
    for name, imports in GRAPH.items():
        if name.startswith("journal_engine.broker"):
            wrong = sorted(i for i in imports if i.startswith("journal_engine.storage")
                           or i.startswith("journal_engine._") and i != "journal_engine._impl")
            assert not wrong, f"{name} reaches below the store: {wrong}"


BACKENDS = ("journal_engine.storage.journal", "journal_engine.storage.lmdb")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_backend_never_imports_the_other(backend):
    (other,) = (b for b in BACKENDS if b != backend)
    modules = [name for name in GRAPH if name.startswith(backend + ".") or name == backend]
    assert modules, f"no modules under {backend}"
    for name in modules:
        wrong = sorted(i for i in GRAPH[name] if i == other or i.startswith(other + "."))
        assert not wrong, f"{name} imports the other backend: {wrong}"


def test_the_storage_floor_imports_no_backend():
    """storage/'s shared modules (protocol, durability, directory_lock, lifecycle, group_commit) stand under both
    backends; only directory_kind, which tells the backends' files apart, and the registry of backends name them."""
    naming_both = {"journal_engine.storage.directory_kind", "journal_engine.storage.backends"}
    floor = [name for name in GRAPH if name.startswith("journal_engine.storage.")
             and not name.startswith(BACKENDS) and name not in naming_both]
    assert {"journal_engine.storage.protocol", "journal_engine.storage.durability"} <= set(floor)
    for name in floor:
        wrong = sorted(i for i in GRAPH[name] if i.startswith(BACKENDS))
        assert not wrong, f"{name} (the shared floor) imports a backend: {wrong}"


def test_no_import_cycle():
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(GRAPH.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(GRAPH):
        if node not in state:
            visit(node)


BROKER = "journal_engine.broker"
BROKER_ENGINE = {f"{BROKER}.{name}" for name in ("broker", "delivery", "redelivery", "transactions", "redrive",
                                                  "dialects")}
BROKER_SYSTEMS = tuple(f"{BROKER}.{name}" for name in ("classic", "qpid", "hornetq"))
BROKER_CONFIG = f"{BROKER}.config"
BROKER_ARTEMIS = f"{BROKER}.artemis"


def broker_floor(module: str) -> int:
    """0 artemis/, 1 the common model, 2 a seed system or config/, 3 the engine (and the package itself)."""
    if module == BROKER or module in BROKER_ENGINE:
        return 3
    if module.startswith(BROKER_SYSTEMS) or module.startswith(BROKER_CONFIG):
        return 2 if module != f"{BROKER_CONFIG}.safe_xml" else 0    # the safe-XML base is a leaf of the broker
    if module.startswith(BROKER_ARTEMIS):
        return 0
    return 1


def test_the_broker_floors_import_only_downwards():
    modules = [name for name in GRAPH if name.startswith(BROKER + ".")]
    assert {f"{BROKER}.classic.dead_letters", f"{BROKER}.qpid.queue_policy", f"{BROKER}.hornetq.dialect",
            f"{BROKER}.artemis.address_settings", f"{BROKER}.redelivery"} <= set(modules)
    for name in modules:
        upward = sorted(i for i in GRAPH[name] if i.startswith(BROKER + ".") and broker_floor(i) > broker_floor(name))
        assert not upward, f"{name} (floor {broker_floor(name)}) imports from a floor above: {upward}"


def test_the_seed_systems_do_not_import_each_other():
    """Classic, Qpid and HornetQ each build on the common broker and Artemis's model, not on one another."""
    for system in BROKER_SYSTEMS:
        others = tuple(other for other in BROKER_SYSTEMS if other != system)
        for name, imports in GRAPH.items():
            if name.startswith(system):
                wrong = sorted(i for i in imports if i.startswith(others))
                assert not wrong, f"{name} imports another seed system: {wrong}"
