"""A Qpid Broker-J virtual host's JSON configuration read into its queue defaults (the reader that
``journal_engine.config.load`` calls for a document that starts with ``{``).

Broker-J keeps a virtual host's configuration as JSON: the virtual host object (``{"name": ...,
"type": ..., "context": {...}, "queues": [...]}``, as a JSON virtual host node stores it), or the
broker's ``config.json`` whose ``virtualhostnodes`` hold it (``virtualHostInitialConfiguration``: the
virtual host object, or its JSON text). Context variables are inherited: the virtual host's outrank
its node's, which outrank the broker's (AbstractConfiguredObject.getContextValue asks the parent for
what its own context lacks). Of the context, ``queue.deadLetterQueueEnabled``,
``queue.maximumDeliveryAttempts`` and ``queue.defaultExpiryPolicy`` are read (the defaults of the
queues declared on the virtual host, docs/broker.md "Qpid Broker-J"); every other variable and
attribute is logged at WARNING with its line and listed as not implemented. The file is read through
``safe_xml.read_source`` (a regular file, at most ``limits.CONFIG_FILE_BYTES_MAX``); a wrong value is a
ConfigError naming the file, the key and its line. ``${...}`` references, which Broker-J expands, are
refused: write the value.
"""
from __future__ import annotations

import json
import json.decoder
import json.scanner
import logging
from typing import Any

from ...errors import ConfigError
from ..artemis.address_settings import AddressSettingsRepository
from ..qpid.queue_policy import CONTEXT_VARIABLES, QpidVirtualHostContext
from .model import BrokerConfig

__all__ = ["qpid_config", "is_json"]

log = logging.getLogger("journal_engine.config")

#: attributes of a virtual host (or node, or broker) that name it and change nothing here
_NAMING_ATTRIBUTES = frozenset({"id", "name", "type", "modelVersion", "description", "durable", "desiredState"})
#: the broker attributes that lead to the virtual host
_NODES = "virtualhostnodes"
_INITIAL = "virtualHostInitialConfiguration"
_CONTEXT = "context"


def is_json(text: str) -> bool:
    """Is this configuration text a JSON document (Broker-J's) rather than XML?"""
    return text.lstrip("\ufeff \t\r\n").startswith("{")


class _LinedObject(dict):
    """A JSON object that knows the line of each member's value (``lines``) and of its own brace."""

    line: int = 1
    lines: dict


def _line(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


class _LinedDecoder(json.JSONDecoder):
    """json's pure-Python scanner with objects that record where each value starts (a scan of the
    object's values passes their start index); the C scanner cannot be hooked so."""

    def __init__(self) -> None:
        super().__init__()
        self.parse_object = self._parse_object
        self.scan_once = json.scanner.py_make_scanner(self)

    @staticmethod
    def _parse_object(s_and_end, strict, scan_once, object_hook, object_pairs_hook, memo=None):
        text, start = s_and_end
        starts: list[int] = []

        def scan(string: str, index: int):
            starts.append(index)
            return scan_once(string, index)

        pairs, end = json.decoder.JSONObject(s_and_end, strict, scan, None, list, memo)
        result = _LinedObject(pairs)
        result.line = _line(text, start)
        result.lines = {key: _line(text, index) for (key, _), index in zip(pairs, starts)}
        return result, end


def _parse(text: str, label: str) -> _LinedObject:
    try:
        document = _LinedDecoder().decode(text.lstrip("\ufeff"))
    except json.JSONDecodeError as exc:
        raise ConfigError(label, f"line {exc.lineno} column {exc.colno}", f"is not valid JSON: {exc.msg}",
                          line=exc.lineno) from None
    except RecursionError:
        raise ConfigError(label, "<nesting>", "is nested too deeply to be a configuration") from None
    if not isinstance(document, _LinedObject):
        raise ConfigError(label, type(document).__name__, "must be a JSON object (a Broker-J virtual host or "
                          "config.json)", line=1)
    return document


class _Reader:
    """One pass over the document; collects what is not implemented."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.unimplemented: list[tuple[str, int | None]] = []

    def fail(self, path: str, value: Any, problem: str, line: int | None) -> ConfigError:
        return ConfigError(path, value, f"{problem} (in {self.label})", line=line)

    def skip(self, path: str, line: int | None) -> None:
        self.unimplemented.append((path, line))
        log.warning("%s, line %s: %s is not implemented by journal_engine; ignored", self.label, line, path)

    def context(self, owner: _LinedObject, path: str) -> dict[str, tuple[Any, int]]:
        """The implemented context variables of ``owner`` with their lines; others are reported."""
        found: dict[str, tuple[Any, int]] = {}
        context = owner.get(_CONTEXT)
        if context is None:
            return found
        if not isinstance(context, _LinedObject):
            raise self.fail(f"{path}{_CONTEXT}", context, "must be a JSON object of context variables",
                            owner.lines[_CONTEXT])
        for key, value in context.items():
            line = context.lines[key]
            if key not in CONTEXT_VARIABLES:
                self.skip(f"{path}{_CONTEXT}/{key}", line)
            elif isinstance(value, str) and "${" in value:
                raise self.fail(f"{path}{_CONTEXT}/{key}", value,
                                "context references (${...}) are not supported; write the value", line)
            else:
                found[key] = (value, line)
        return found

    def attributes(self, owner: _LinedObject, path: str, known: frozenset[str]) -> None:
        for key in owner:
            if key not in known and key not in _NAMING_ATTRIBUTES:
                self.skip(f"{path}{key}", owner.lines[key])

    def virtual_host(self, document: _LinedObject) -> dict[str, tuple[Any, int]]:
        """The context variables of the virtual host, inherited as Broker-J inherits them."""
        if _NODES not in document:
            self.attributes(document, "", frozenset({_CONTEXT}))
            return self.context(document, "")
        self.attributes(document, "", frozenset({_CONTEXT, _NODES}))
        nodes = document[_NODES]
        if not isinstance(nodes, list) or len(nodes) != 1 or not isinstance(nodes[0], _LinedObject):
            names = [n.get("name") for n in nodes if isinstance(n, dict)] if isinstance(nodes, list) else nodes
            raise self.fail(_NODES, names, "must hold exactly one virtual host node (a broker here is one "
                            "virtual host)", document.lines[_NODES])
        node = nodes[0]
        path = f"{_NODES}/{node.get('name', 0)}/"
        self.attributes(node, path, frozenset({_CONTEXT, _INITIAL}))
        variables = self.context(document, "")
        variables.update(self.context(node, path))
        host = node.get(_INITIAL)
        if host is None:
            return variables
        if isinstance(host, str):         # the virtual host's JSON as text, as config.json usually holds it
            try:
                host = _parse(host, f"{self.label} {path}{_INITIAL}")
            except ConfigError as exc:
                raise self.fail(f"{path}{_INITIAL}", exc.value, exc.problem, node.lines[_INITIAL]) from None
            line = node.lines[_INITIAL]
            host.lines = {key: line for key in host.lines}
            if isinstance(host.get(_CONTEXT), _LinedObject):
                host[_CONTEXT].lines = {key: line for key in host[_CONTEXT].lines}
        if not isinstance(host, _LinedObject):
            raise self.fail(f"{path}{_INITIAL}", host, "must be the virtual host's JSON object or its text",
                            node.lines[_INITIAL])
        host_path = f"{path}{_INITIAL}/"
        self.attributes(host, host_path, frozenset({_CONTEXT}))
        variables.update(self.context(host, host_path))
        return variables

    def read(self, document: _LinedObject) -> QpidVirtualHostContext:
        variables = self.virtual_host(document)
        try:
            return QpidVirtualHostContext.from_variables({key: value for key, (value, _) in variables.items()})
        except ConfigError as exc:
            key = exc.field if exc.field in variables else exc.value
            raise self.fail(f"{_CONTEXT}/{key}", exc.value, exc.problem,
                            variables[key][1] if key in variables else None) from None


def qpid_config(text: str, label: str) -> BrokerConfig:
    """The BrokerConfig of a Broker-J virtual host's (or config.json's) JSON ``text`` read from ``label``:
    its queue defaults as ``qpid_context``, and what it holds that is not implemented."""
    reader = _Reader(label)
    context = reader.read(_parse(text, label))
    return BrokerConfig(address_settings=AddressSettingsRepository(), source=label, system="qpid",
                        unimplemented=reader.unimplemented, qpid_context=context)
