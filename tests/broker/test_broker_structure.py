"""The broker package's shape: no import cycle (TYPE_CHECKING and function-level imports count), no
object in the whole journal_engine package reading or writing another object's underscore fields, and
the public names still where users import them from."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import journal_engine

pytestmark = pytest.mark.same_on_both   # read from the source

PACKAGE_DIR = Path(journal_engine.__file__).parent
BROKER_DIR = PACKAGE_DIR / "broker"
# Where one object's code may touch another's underscore fields, and why: (file under journal_engine/, the
# name it reaches through) -> the reason.
OWN_ACCESSORS = {
    ("_twin/broker_objects.py", "data"): "the twin of _broker_objects.pyx, whose module functions read the C "
                                         "fields of its own classes (MessageData)",
    ("_twin/broker_objects.py", "message"): "the same: delivery_of() reads its own Message's fields",
    ("_twin/scan.py", "cols"): "the twin of _scan.pyx, whose module functions read the C arrays of its own "
                               "FrameColumns",
    ("_twin/replay.py", "cols"): "the twin of _replay.pyx, which reads the C arrays of FrameColumns through "
                                 "_scan.pxd, the contract between the compiled modules",
    ("_twin/image.py", "cols"): "the twin of _image.pyx, which reads and fills the C arrays of FrameColumns "
                                "through _scan.pxd, the contract between the compiled modules",
    ("integrations/kombu.py", "channel"): "the Transport reads the subscriptions of its own Channel class, "
                                          "defined beside it (kombu's virtual transport pairs the two)",
    ("spark/environment.py", "spark.sparkContext"): "pyspark reaches the JVM only through SparkContext._jvm",
}
# underscore names that are public API: os._exit, and a namedtuple's methods (named so to keep clear of
# its fields)
PUBLIC_UNDERSCORE_NAMES = {("os", "_exit"), (None, "_replace"), (None, "_asdict"), (None, "_make"),
                           (None, "_fields")}


def _reached_through(node: ast.expr) -> str | None:
    """The dotted name an attribute is read through (``store`` in ``store._lock``), None for a call's
    result; ``super()`` counts as ``self``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super":
        return "self"
    if isinstance(node, ast.Attribute):
        owner = _reached_through(node.value)
        return None if owner is None else f"{owner}.{node.attr}"
    return None


def underscore_reaches(path: Path) -> list[tuple[int, str, str]]:
    """(line, the name reached through, the underscore field) for every ``x._field`` in the module whose
    ``x`` is not self or cls (``_field`` starts with an underscore and a lower-case letter; dunders and
    module constants are not fields)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if not isinstance(node, ast.Attribute) or not re.match(r"_[a-z]", node.attr) or node.attr.endswith("__"):
            continue
        owner = _reached_through(node.value)
        if owner in ("self", "cls"):
            continue
        if (owner, node.attr) in PUBLIC_UNDERSCORE_NAMES or (None, node.attr) in PUBLIC_UNDERSCORE_NAMES:
            continue
        found.append((node.lineno, owner or "<an expression>", node.attr))
    return found


def _module_imports(path: Path) -> set[str]:
    """Sibling modules ``path`` imports, wherever the import statement sits."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
            elif node.level == 0 and (node.module or "").startswith("journal_engine.broker."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names if a.name.startswith("journal_engine.broker."))
    return found - {path.stem}


def test_no_import_cycle_in_the_broker_package():
    graph = {path.stem: _module_imports(path) for path in BROKER_DIR.glob("*.py") if path.stem != "__init__"}
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        for imported in sorted(graph.get(module, ())):
            assert imported not in trail, "import cycle: " + " -> ".join(trail[trail.index(imported):] + [imported])
            if imported not in done:
                visit(imported, trail + [imported])
        done.add(module)

    for module in sorted(graph):
        visit(module, [module])


def test_no_module_touches_another_objects_underscore_fields():
    """Every module of the package, in every folder (the broker's, message_store/, journal/, the twins,
    the products), read as code: strings and comments that name ``journal_engine._impl`` are no reach."""
    offenders = []
    paths = sorted(PACKAGE_DIR.rglob("*.py"))
    assert {"broker/classic/dead_letters.py", "message_store/message_store.py", "storage/journal/journal.py"} <= {
        str(path.relative_to(PACKAGE_DIR)) for path in paths}
    for path in paths:
        name = str(path.relative_to(PACKAGE_DIR))
        for number, owner, field in underscore_reaches(path):
            if (name, owner) not in OWN_ACCESSORS:
                offenders.append(f"{name}:{number}: {owner}.{field}")
    assert not offenders, "\n".join(offenders)


def test_every_allowed_reach_is_still_there():
    """An allowance whose reach is gone is removed with it (so the list never hides a new one)."""
    reaches = {(str(path.relative_to(PACKAGE_DIR)), owner) for path in PACKAGE_DIR.rglob("*.py")
               for _line, owner, _field in underscore_reaches(path)}
    assert set(OWN_ACCESSORS) <= reaches, sorted(set(OWN_ACCESSORS) - reaches)


def test_public_names_import_from_where_they_always_did():
    from journal_engine import AddressSettings, AddressSettingsRepository, Broker, Consumer, Session  # noqa: F401
    from journal_engine.broker import ArtemisBrokerXml, read_artemis_broker_xml  # noqa: F401
    repository = AddressSettingsRepository.from_broker_xml(
        '<configuration><address-settings><address-setting match="q.#"><redelivery-delay>7</redelivery-delay>'
        '</address-setting></address-settings></configuration>')
    assert repository.get("q.a").redelivery_delay == 7
    assert AddressSettings.from_xml("<redelivery-delay>3</redelivery-delay>").redelivery_delay == 3


def test_the_settings_cache_probe_answers_what_get_returned():
    repository = journal_engine.AddressSettingsRepository()
    assert repository.cached("a") is None
    settings = repository.get("a")
    assert repository.cached("a") is settings
    repository.add("a", journal_engine.AddressSettings(expiry_delay=5))
    assert repository.cached("a") is None and repository.get("a").expiry_delay == 5


def _state_assignments(path: Path) -> list[int]:
    """Lines of ``x.state = ...`` (or ``+=``, or a tuple target naming it) in a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and part.attr == "state":
                    found.append(node.lineno)
    return found


def test_a_reference_changes_state_only_through_its_own_methods():
    """Reference.state is written by the Reference alone (_broker_objects.pyx and its twin): the broker
    calls the transition's method (dispatch, schedule, fall_due, leave_queue, ...)."""
    offenders = [f"{path.relative_to(PACKAGE_DIR)}:{line}" for path in sorted(BROKER_DIR.rglob("*.py"))
                 for line in _state_assignments(path)]
    assert not offenders, offenders


def test_redelivery_names_no_seed_system():
    """redelivery.py takes a failed delivery back by the rules objects it is given: it imports no seed
    system's module and asks no object its type (the systems' rules are in artemis/, classic/, qpid/)."""
    path = BROKER_DIR / "redelivery.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {module for module in imported if module.split(".")[0] in ("artemis", "classic", "qpid", "hornetq")}
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert not calls & {"isinstance", "type"}
