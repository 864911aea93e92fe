"""Configuration XML read safely into plain values: sources and encodings, parsing through defusedxml
(a DOCTYPE, an entity or an external reference is refused), elements that know their line, value
parsing, warnings for what the broker does not implement, and an Artemis broker.xml walked into a
``BrokerXmlDocument``.

Why a module of its own: the settings classes (``address_settings``) build themselves from these plain
values, and the broker.xml reader (``artemis``) builds the settings; keeping the XML below both lets
each import only what sits beneath it, with no import cycle. Nothing here knows the settings classes.
"""
from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any
from xml.etree import ElementTree

import defusedxml
from defusedxml.ElementTree import DefusedXMLParser

from ...errors import ConfigError
from ...limits import CONFIG_FILE_BYTES_MAX, ID_CACHE_SIZE_MAX, JAVA_INT_MAX, JAVA_INT_MIN, JAVA_LONG_MAX, JAVA_LONG_MIN

__all__ = ["ARTEMIS_IGNORED_ADDRESS_SETTING_ELEMENTS", "BrokerXmlDocument", "address_setting_element",
           "address_setting_values", "artemis_document", "element_name_of",
           "line_of", "local_name", "located", "namespace_of", "parse_xml", "read_broker_xml_document",
           "read_source", "renamed", "report_unimplemented", "element_line", "ARTEMIS_IMPLEMENTED_CORE_ELEMENTS",
           "parse_scan_period", "check_scan_period",
           "ARTEMIS_ROOTS"]

#: every element a configuration file holds that the broker does not implement is logged here, at WARNING
log = logging.getLogger("journal_engine.config")

# Java's long and int: Artemis reads its values into these.

_WRAPPER = "journal-engine-fragment"
_DECLARATION_RE = re.compile(r"^\s*<\?xml[^>]*\?>", re.IGNORECASE)
_ENCODING_RE = re.compile(rb"^\s*<\?xml[^>]*encoding\s*=\s*[\"']([A-Za-z0-9._-]+)[\"']")
_LONG_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")

# Elements Artemis reads inside <address-setting> (FileConfigurationParser.parseAddressSettings) that
# the settings classes do not model: accepted and reported in ``ignored_elements``, not refused.
ARTEMIS_IGNORED_ADDRESS_SETTING_ELEMENTS = frozenset({
    "max-size-bytes", "max-size-messages",
    "max-size-bytes-reject-threshold", "page-size-bytes", "page-max-cache-size", "page-limit-bytes",
    "page-limit-messages", "page-full-policy", "max-read-page-messages", "max-read-page-bytes",
    "prefetch-page-messages", "prefetch-page-bytes", "message-counter-history-day-limit",
    "address-full-policy", "last-value-queue", "default-last-value-queue", "default-last-value-key",
    "default-non-destructive", "default-exclusive-queue", "default-group-rebalance",
    "default-group-rebalance-pause-dispatch", "default-group-buckets", "default-group-first-key",
    "redistribution-delay", "slow-consumer-threshold",
    "slow-consumer-threshold-measurement-unit", "slow-consumer-check-period", "slow-consumer-policy",
    "auto-create-jms-queues", "auto-delete-jms-queues", "auto-create-jms-topics", "auto-delete-jms-topics",
    "auto-create-queues", "config-delete-queues",
    "auto-create-addresses", "auto-delete-addresses", "auto-delete-addresses-delay",
    "auto-delete-addresses-skip-usage-check", "config-delete-addresses", "config-delete-diverts",
    "management-browse-page-size", "management-message-attribute-size-limit", "default-purge-on-no-consumers",
    "default-max-consumers", "default-consumers-before-dispatch", "default-delay-before-dispatch",
    "default-queue-routing-type", "default-address-routing-type", "default-consumer-window-size",
    "default-ring-size", "retroactive-message-count", "enable-metrics", "enable-ingress-timestamp",
    "id-cache-size", "initial-queue-buffer-size", "queue-prefetch",
})


class _LinedElement(ElementTree.Element):
    """An element that knows the line its start tag is on (``line``), for errors and warnings."""

    line: int | None = None


class _LineRecordingBuilder:
    """A tree builder for defusedxml's parser that stamps each element with expat's current line."""

    def __init__(self) -> None:
        self._builder = ElementTree.TreeBuilder(element_factory=_LinedElement)
        self.expat: Any = None          # set once the parser exists (it is built around this target)

    def start(self, tag: str, attrib: dict[str, str]) -> ElementTree.Element:
        element = self._builder.start(tag, attrib)
        element.line = self.expat.CurrentLineNumber if self.expat is not None else None
        return element

    def end(self, tag: str) -> ElementTree.Element:
        return self._builder.end(tag)

    def data(self, data: str) -> None:
        self._builder.data(data)

    def close(self) -> ElementTree.Element:
        return self._builder.close()


def local_name(element: ElementTree.Element) -> str:
    tag = element.tag
    if not isinstance(tag, str):
        return ""
    return tag.rsplit("}", 1)[-1].lower()


def namespace_of(element: ElementTree.Element) -> str:
    """The element's namespace URI ("" when it has none)."""
    tag = element.tag
    return tag[1:].split("}", 1)[0] if isinstance(tag, str) and tag.startswith("{") else ""


def line_of(element: ElementTree.Element) -> int | None:
    """The line of the element's start tag (None for an element not parsed by ``parse_xml``)."""
    return getattr(element, "line", None)


def read_source(path_or_text: str | bytes | os.PathLike[str], what: str) -> tuple[str, str]:
    """(text, label) from a path, bytes or the text itself (a str starting with ``<``, or ``{`` for JSON)."""
    if isinstance(path_or_text, os.PathLike) or (isinstance(path_or_text, str)
                                                 and not path_or_text.lstrip().startswith(("<", "{"))):
        path = os.fspath(path_or_text)
        return _decode(_read_config_file(path, what), path), path
    if isinstance(path_or_text, bytes):
        return _decode(path_or_text, what), what
    if isinstance(path_or_text, str):
        return path_or_text, what
    raise TypeError(f"expected a path, XML text or bytes, not {type(path_or_text).__name__}")


def _read_config_file(path: str, what: str) -> bytes:
    """The bytes of a configuration file: a regular file of at most CONFIG_FILE_BYTES_MAX. A FIFO, a
    device or a socket is refused before it is read (a FIFO would block the caller, /dev/zero would
    fill memory); the check is made again on the open descriptor (opened without blocking), so a path
    swapped between the stat and the open is refused too."""
    def refuse_special(mode: int) -> None:
        if not stat.S_ISREG(mode):
            raise ConfigError(what, path, "is not a regular file (a FIFO, device, socket or directory)",
                              hint="give the path of the configuration file itself")

    def refuse_size(size: int) -> None:
        if size > CONFIG_FILE_BYTES_MAX:
            raise ConfigError(what, path, f"is larger than the {CONFIG_FILE_BYTES_MAX} bytes a configuration "
                                          f"file may hold (limits.CONFIG_FILE_BYTES_MAX)",
                              hint="give the configuration file itself")
    try:
        refuse_special(os.stat(path).st_mode)
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(descriptor, "rb") as handle:
            status = os.fstat(handle.fileno())
            refuse_special(status.st_mode)
            refuse_size(status.st_size)
            data = handle.read(CONFIG_FILE_BYTES_MAX + 1)       # a file that grew since the fstat
    except OSError as exc:
        raise ConfigError(what, path, f"cannot be read: {exc.strerror or exc}") from exc
    refuse_size(len(data))
    return data


def _decode(data: bytes, label: str) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        encoding = "utf-8-sig"
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):
        encoding = "utf-16"
    else:
        m = _ENCODING_RE.match(data)
        encoding = m.group(1).decode("ascii") if m else "utf-8"
    try:
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        raise ConfigError(label, f"encoding {encoding}", f"cannot be decoded: {exc}") from exc


def _parse_with_defusedxml(body: str, label: str) -> ElementTree.Element:
    builder = _LineRecordingBuilder()
    parser = DefusedXMLParser(target=builder, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    builder.expat = parser.parser
    try:
        parser.feed(body)
        return parser.close()
    except defusedxml.DTDForbidden as exc:
        raise ConfigError(label, f"<!DOCTYPE {exc.name}>", "a DOCTYPE declaration is refused",
                          line=builder.expat.CurrentLineNumber,
                          hint="a DTD can declare entities (entity-expansion and external-entity attacks); "
                               "remove it") from exc
    except defusedxml.EntitiesForbidden as exc:
        raise ConfigError(label, f"<!ENTITY {exc.name}>", "an ENTITY declaration is refused",
                          line=builder.expat.CurrentLineNumber, hint="remove the entity declarations") from exc
    except defusedxml.DefusedXmlException as exc:         # ExternalReferenceForbidden, NotSupportedError
        raise ConfigError(label, str(exc), "an external reference is refused",
                          line=builder.expat.CurrentLineNumber) from exc
    except ElementTree.ParseError as exc:
        line, column = getattr(exc, "position", (None, None))
        raise ConfigError(label, f"column {column}", f"is not well-formed XML: {exc}",
                          line=line) from exc


def parse_xml(text: str | bytes, label: str, *, wrap: bool = False) -> ElementTree.Element:
    """The root element of a configuration text, parsed by defusedxml: a DOCTYPE (so any entity or
    external reference) is refused with ConfigError, as is malformed XML (with line and column). Every
    element carries the line of its start tag (``line_of``). ``wrap``: the text may also be a run of
    elements, read under a wrapper element (a single element is returned as parsed)."""
    if isinstance(text, bytes):
        text = _decode(text, label)
    if not isinstance(text, str):
        raise TypeError(f"expected XML text, not {type(text).__name__}")
    body = _DECLARATION_RE.sub("", text, count=1)       # the text is already decoded; lines are kept
    if not wrap:
        return _parse_with_defusedxml(body, label)
    try:
        return _parse_with_defusedxml(body, label)
    except ConfigError as exc:
        if not isinstance(exc.__cause__, ElementTree.ParseError):
            raise                                       # refused, not merely several elements
    return _parse_with_defusedxml(f"<{_WRAPPER}>{body}</{_WRAPPER}>", label)


def located(exc: ConfigError, line: int | None, field: str | None = None) -> ConfigError:
    """The same problem, at ``line`` (kept when the error already names one) and, when given, under
    another name (the XML element instead of the Python field)."""
    return ConfigError(field if field is not None else exc.field, exc.value, exc.problem, hint=exc.hint,
                       line=exc.line if exc.line is not None else line)


def renamed(exc: ConfigError, field: str, line: int | None = None) -> ConfigError:
    """The same problem reported under another name (the XML element instead of the Python field)."""
    return located(exc, line, field)


def report_unimplemented(element: ElementTree.Element, path: str, source: str,
                         found: list[tuple[str, int | None]]) -> None:
    """Log at WARNING that ``element`` (at ``path`` in ``source``) is not implemented, and list it."""
    line = line_of(element)
    found.append((path, line))
    log.warning("%s, line %s: <%s> is not implemented by journal_engine; ignored", source, line, path)


def _text(element: ElementTree.Element, label: str) -> str:
    if any(isinstance(child.tag, str) for child in element):
        raise ConfigError(label, f"<{local_name(element)}>", "must hold text, not elements")
    value = (element.text or "").strip()
    if "${" in value:
        raise ConfigError(label, value, "property substitution (${...}) is not supported; write the value")
    return value


def _parse_long(value: str, label: str, low: int = JAVA_LONG_MIN, high: int = JAVA_LONG_MAX) -> int:
    if not _LONG_RE.fullmatch(value):
        raise ConfigError(label, value, "is not an integer")
    number = int(value)
    if not low <= number <= high:
        raise ConfigError(label, value, f"out of range [{low}, {high}]")
    return number


def check_scan_period(label: str, value: Any) -> int:
    """A scan period in ms (``message-expiry-scan-period``, ``address-queue-scan-period``), as Artemis
    validates it (MINUS_ONE_OR_GT_ZERO): -1 (never) or in [1, Long.MAX_VALUE]."""
    if isinstance(value, bool) or not isinstance(value, int) or not (value == -1 or 0 < value <= JAVA_LONG_MAX):
        raise ConfigError(label, value, "must be -1 (never scan) or a period > 0 in milliseconds")
    return value


def parse_scan_period(value: str, label: str) -> int:
    """``check_scan_period`` of an element's text."""
    if not _LONG_RE.fullmatch(value):
        raise ConfigError(label, value, "is not an integer")
    return check_scan_period(label, int(value))


def _parse_double(value: str, label: str) -> float:
    if not _DOUBLE_RE.fullmatch(value):
        raise ConfigError(label, value, "is not a number")
    return float(value)


def _parse_bool(value: str, label: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise ConfigError(label, value, "must be true or false")
    return lowered == "true"


def _parse_delays(value: str, label: str) -> tuple[int, ...]:
    words = [w for w in re.split(r"[\s,]+", value) if w]
    return tuple(_parse_long(w, label, 0, JAVA_LONG_MAX) for w in words)


_ELEMENT_FIELDS: dict[str, tuple[str, Any]] = {
    "dead-letter-address": ("dead_letter_address", None),
    "max-delivery-attempts": ("max_delivery_attempts", lambda v, l: _parse_long(v, l, JAVA_INT_MIN, JAVA_INT_MAX)),
    "redelivery-delay": ("redelivery_delay", _parse_long),
    "redelivery-delay-multiplier": ("redelivery_delay_multiplier", _parse_double),
    "max-redelivery-delay": ("max_redelivery_delay", _parse_long),
    "redelivery-collision-avoidance-factor": ("redelivery_collision_avoidance_factor", _parse_double),
    "auto-create-dead-letter-resources": ("auto_create_dead_letter_resources", _parse_bool),
    "dead-letter-queue-prefix": ("dead_letter_queue_prefix", None),
    "dead-letter-queue-suffix": ("dead_letter_queue_suffix", None),
    "expiry-address": ("expiry_address", None),
    "auto-create-expiry-resources": ("auto_create_expiry_resources", _parse_bool),
    "expiry-queue-prefix": ("expiry_queue_prefix", None),
    "expiry-queue-suffix": ("expiry_queue_suffix", None),
    "expiry-delay": ("expiry_delay", _parse_long),
    "redelivery-delays": ("redelivery_delays", _parse_delays),     # journal_engine extension
    "min-expiry-delay": ("min_expiry_delay", _parse_long),
    "max-expiry-delay": ("max_expiry_delay", _parse_long),
    "no-expiry": ("no_expiry", _parse_bool),
    "send-to-dla-on-no-route": ("send_to_dla_on_no_route", _parse_bool),
    "max-rollback-delay": ("max_rollback_delay", _parse_long),      # journal_engine extension
    "auto-delete-queues": ("auto_delete_queues", _parse_bool),
    "auto-delete-created-queues": ("auto_delete_created_queues", _parse_bool),
    "auto-delete-queues-delay": ("auto_delete_queues_delay", _parse_long),
    "auto-delete-queues-message-count": ("auto_delete_queues_message_count", _parse_long),
    "auto-delete-queues-skip-usage-check": ("auto_delete_queues_skip_usage_check", _parse_bool),
}


def element_name_of(field_name: str) -> str:
    """The broker.xml element of an AddressSettings field (the field's own name when it has none)."""
    return next((e for e, (f, _) in _ELEMENT_FIELDS.items() if f == field_name), field_name)


def address_setting_values(element: ElementTree.Element, label: str, source: str = "address-setting",
                           unimplemented: list[tuple[str, int | None]] | None = None
                           ) -> tuple[dict[str, Any], list[str]]:
    """The AddressSettings field values of one ``<address-setting>`` element, and the Artemis elements in
    it that the broker does not implement (each logged at WARNING with its line, and added to
    ``unimplemented`` as (path, line) when given). An unknown element or a bad value raises ConfigError
    naming the element, the value and the line."""
    values: dict[str, Any] = {}
    ignored: list[str] = []
    found = unimplemented if unimplemented is not None else []
    for child in element:
        if not isinstance(child.tag, str):
            continue            # comments and processing instructions
        name = local_name(child)
        child_label = f"{label}/{name}"
        if name in _ELEMENT_FIELDS:
            field_name, parse = _ELEMENT_FIELDS[name]
            try:
                raw = _text(child, child_label)
                values[field_name] = raw if parse is None else parse(raw, child_label)
            except ConfigError as exc:
                raise located(exc, line_of(child)) from exc
        elif name in ARTEMIS_IGNORED_ADDRESS_SETTING_ELEMENTS:
            ignored.append(name)
            report_unimplemented(child, child_label, source, found)
        else:
            raise ConfigError(child_label, f"<{child.tag.rsplit('}', 1)[-1]}>",
                              "is not an address-setting element", line=line_of(child),
                              hint="check the spelling against Artemis's broker.xml schema")
    return values, ignored


def element_line(element: ElementTree.Element, name: str) -> int | None:
    """The line of the last child element called ``name`` (the one whose value counts), else the element's."""
    lines = [line_of(child) for child in element if local_name(child) == name]
    return lines[-1] if lines else line_of(element)


def address_setting_element(text: str | bytes) -> tuple[ElementTree.Element, str]:
    """The element (and its label) that ``AddressSettings.from_xml`` reads: one ``<address-setting>``, or
    a run of its child elements. Several settings (``<address-settings>``) raise ConfigError."""
    root = parse_xml(text, "address-setting", wrap=True)
    if root.tag != _WRAPPER:                 # a single element: one <address-setting>, or a run of one
        wrapper = ElementTree.Element(_WRAPPER)
        wrapper.append(root)
        root = wrapper
    element = root
    children = [child for child in root if isinstance(child.tag, str)]
    if len(children) == 1 and local_name(children[0]) == "address-setting":
        element = children[0]
    elif any(local_name(c) == "address-settings" for c in children):
        raise ConfigError("address-settings", "<address-settings>", "holds several settings",
                          hint="read it with AddressSettingsRepository.from_broker_xml")
    match = element.get("match")
    label = "address-setting" if match is None else f"address-setting[match={match!r}]"
    return element, label


@dataclass
class BrokerXmlDocument:
    """What an Artemis broker.xml says, as plain values; the ``<address-settings>`` elements are kept as
    elements, so that they are checked in the same order as the repository is built from them.
    ``unimplemented`` lists (element path, line) of every element the broker does not implement (each
    also logged at WARNING)."""

    source: str
    delimiter: str = "."
    any_words: str = "#"
    single_word: str = "*"
    literal_markers: str | None = None
    wildcard_routing_enabled: bool | None = None
    max_redelivery_records: int | None = None                      # None = not in the file
    persist_delivery_count_before_delivery: bool | None = None     # None = not in the file
    message_expiry_scan_period: int | None = None                  # ms, -1 = never; None = not in the file
    address_queue_scan_period: int | None = None                   # ms, -1 = never; None = not in the file
    id_cache_size: int | None = None                               # None = not in the file
    persist_id_cache: bool | None = None                           # None = not in the file
    address_settings_lists: list[ElementTree.Element] = field(default_factory=list)
    unimplemented: list[tuple[str, int | None]] = field(default_factory=list)
    namespace: str = ""                                            # the root element's ("urn:hornetq", ...)
    artemis_only: list[ElementTree.Element] = field(default_factory=list)   # core elements HornetQ lacked


#: the <core> children of a broker.xml that the broker reads; every other one is a WARNING
ARTEMIS_IMPLEMENTED_CORE_ELEMENTS = frozenset({
    "address-settings", "wildcard-addresses", "literal-match-markers", "max-redelivery-records",
    "persist-delivery-count-before-delivery", "message-expiry-scan-period", "address-queue-scan-period",
    "id-cache-size", "persist-id-cache"})
ARTEMIS_ROOTS = ("configuration", "core")


def read_broker_xml_document(path_or_text: str | bytes | os.PathLike[str]) -> BrokerXmlDocument:
    """Read an Artemis (or HornetQ) broker.xml: a path, the XML text starting with ``<``, or bytes.

    See ``artemis_document`` for what is read and refused. Thread-safe (no shared state).
    """
    text, label = read_source(path_or_text, "broker.xml")
    return artemis_document(parse_xml(text, label), label)


def artemis_document(root: ElementTree.Element, label: str) -> BrokerXmlDocument:
    """The ``BrokerXmlDocument`` of a parsed broker.xml.

    The root must be ``<configuration>`` (with a ``<core>`` child, or the settings directly under it) or
    ``<core>``; namespaces are ignored. An unknown element inside ``<wildcard-addresses>`` or a bad value
    raise ConfigError naming the element, the value and the line; any other element the broker does not
    implement is logged at WARNING with its line and listed in ``unimplemented``.
    """
    root_name = local_name(root)
    if root_name not in ARTEMIS_ROOTS:
        raise ConfigError(label, f"<{root_name}>", "is not an Artemis broker.xml root", line=line_of(root),
                          hint="expected <configuration> or <core>")
    document = BrokerXmlDocument(label, namespace=namespace_of(root))
    core = root
    if root_name == "configuration":
        core = next((child for child in root if local_name(child) == "core"), root)
        if core is not root:
            for child in root:
                if child is not core:
                    report_unimplemented(child, local_name(child), label, document.unimplemented)
    for child in core:
        name = local_name(child)
        if name in ("max-redelivery-records", "literal-match-markers", "wildcard-addresses",
                    "address-queue-scan-period"):
            document.artemis_only.append(child)
        try:
            _read_core_element(child, name, document)
        except ConfigError as exc:
            raise located(exc, line_of(child)) from exc
    return document


def _read_core_element(child: ElementTree.Element, name: str, document: BrokerXmlDocument) -> None:
    if name == "wildcard-addresses":
        for item in child:
            item_name = local_name(item)
            item_label = f"wildcard-addresses/{item_name}"
            try:
                if item_name == "routing-enabled":
                    document.wildcard_routing_enabled = _parse_bool(_text(item, item_label), item_label)
                    if document.wildcard_routing_enabled:       # the broker routes by exact address only
                        report_unimplemented(item, item_label, document.source, document.unimplemented)
                elif item_name in ("delimiter", "any-words", "single-word"):
                    value = _text(item, item_label)
                    if len(value) != 1:
                        raise ConfigError(item_label, value, "must be exactly one character")
                    if item_name == "delimiter":
                        document.delimiter = value
                    elif item_name == "any-words":
                        document.any_words = value
                    else:
                        document.single_word = value
                else:
                    raise ConfigError(item_label, f"<{item_name}>", "is not a wildcard-addresses element",
                                      hint="expected routing-enabled, delimiter, any-words or single-word")
            except ConfigError as exc:
                raise located(exc, line_of(item)) from exc
    elif name == "literal-match-markers":
        document.literal_markers = _text(child, "literal-match-markers") or None
    elif name == "max-redelivery-records":
        document.max_redelivery_records = _parse_long(_text(child, name), name, -1, JAVA_INT_MAX)
    elif name == "persist-delivery-count-before-delivery":
        document.persist_delivery_count_before_delivery = _parse_bool(_text(child, name), name)
    elif name == "message-expiry-scan-period":
        document.message_expiry_scan_period = parse_scan_period(_text(child, name), name)
    elif name == "address-queue-scan-period":
        document.address_queue_scan_period = parse_scan_period(_text(child, name), name)
    elif name == "id-cache-size":
        document.id_cache_size = _parse_long(_text(child, name), name, 0, ID_CACHE_SIZE_MAX)
    elif name == "persist-id-cache":
        document.persist_id_cache = _parse_bool(_text(child, name), name)
    elif name == "address-settings":
        document.address_settings_lists.append(child)
    else:
        report_unimplemented(child, name, document.source, document.unimplemented)
