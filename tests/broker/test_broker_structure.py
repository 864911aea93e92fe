"""The broker package's shape: no import cycle (TYPE_CHECKING and function-level imports count), no
object reading or writing another object's underscore fields, and the public names still where users
import them from."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import journal_engine

BROKER_DIR = Path(journal_engine.__file__).parent / "broker"
# message.py's delivery_of() is Message's own accessor of its fields, defined next to the class
OWN_ACCESSORS = {("message.py", "message")}


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
    pattern = re.compile(r"\b([a-z_][a-z0-9_]*)\._[a-z]")
    offenders = []
    for path in sorted(BROKER_DIR.glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            for match in pattern.finditer(code):
                if match.group(1) not in ("self", "cls") and (path.name, match.group(1)) not in OWN_ACCESSORS:
                    offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


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
