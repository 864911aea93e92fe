"""An ActiveMQ Classic activemq.xml read into a ``ClassicBrokerConfig`` (the reader that
``journal_engine.config.load`` calls for a ``<beans>`` or ``<broker>`` root).

What is read (attribute names as Classic's XBean schema spells them):

* ``<broker schedulerSupport="...">``;
* ``<destinationPolicy><policyMap>``: ``<policyEntries><policyEntry queue="..."|topic="...">`` and
  ``<defaultEntry><policyEntry>``, each with ``expireMessagesPeriod``, ``prioritizedMessages``, the
  producer audit's ``enableAudit``, ``maxAuditDepth``, ``maxQueueAuditDepth``, ``maxProducersToAudit``,
  and its ``<deadLetterStrategy>``:
  ``<sharedDeadLetterStrategy>``, ``<individualDeadLetterStrategy>`` or ``<discarding>`` with
  ``processExpired``, ``processNonPersistent``, ``expiration``, ``enableAudit``, ``maxAuditDepth``,
  ``maxProducersToAudit`` and the individual strategy's ``queuePrefix``, ``topicPrefix``,
  ``queueSuffix``, ``topicSuffix``, ``useQueueForQueueMessages``, ``useQueueForTopicMessages``,
  ``destinationPerDurableSubscriber``;
  a shared strategy's ``<deadLetterQueue><queue physicalName="..."/></deadLetterQueue>``;
* ``<plugins>``: ``<redeliveryPlugin fallbackToDeadLetter sendToDlqIfMaxRetriesExceeded>`` with its
  ``<redeliveryPolicyMap><redeliveryPolicyMap>`` (``<redeliveryPolicyEntries>`` of
  ``<redeliveryPolicy queue|topic ...>``, ``<defaultEntry><redeliveryPolicy>``), and
  ``<discardingDLQBrokerPlugin dropAll dropTemporaryTopics dropTemporaryQueues dropOnly reportInterval>``.
  A ``<redeliveryPolicy>`` takes every ClassicRedeliveryPolicy attribute (``maximumRedeliveries``,
  ``initialRedeliveryDelay``, ``redeliveryDelay``, ``useExponentialBackOff``, ``backOffMultiplier``,
  ``maximumRedeliveryDelay``, ``useCollisionAvoidance``, ``collisionAvoidancePercent``) and the
  journal_engine extension ``redeliveryDelays`` (docs/address-settings.md).

Everything else (other beans, broker children and attributes, policy attributes, plugins) is not
implemented: each is logged at WARNING with its line and listed in ``BrokerConfig.unimplemented``. A
wrong value raises ConfigError naming the element, the attribute, the value and the line.
"""
from __future__ import annotations

import re
from typing import Any
from xml.etree import ElementTree

from ...limits import JAVA_INT_MAX, JAVA_LONG_MAX
from ...errors import ConfigError
from ..artemis.address_settings import AddressSettingsRepository
from .model import BrokerConfig
from ..classic.config import EXPIRE_MESSAGES_PERIOD_MS_DEFAULT, ClassicBrokerConfig
from ..classic.destinations import QUEUE, TOPIC, ClassicDestinationMap, check_pattern
from ..classic.plugins import DiscardingDLQPlugin, RedeliveryPlugin, compile_drop_only
from ..classic.policy import ClassicRedeliveryPolicy
from ..classic.producer_audit import AuditPolicy
from .safe_xml import line_of, local_name, located, report_unimplemented
from ..classic.dead_letter_strategy import (DeadLetterStrategy, DiscardingDeadLetterStrategy, IndividualDeadLetterStrategy,
                                   SharedDeadLetterStrategy)

__all__ = ["classic_config", "read_classic_document"]

_INT_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")

# attribute -> (field, parser) of each element read
_STRATEGY_ATTRIBUTES = {
    "processExpired": ("process_expired", "bool"),
    "processNonPersistent": ("process_non_persistent", "bool"),
    "expiration": ("expiration", "long"),
    "enableAudit": ("enable_audit", "bool"),
    "maxAuditDepth": ("max_audit_depth", "int"),
    "maxProducersToAudit": ("max_producers_to_audit", "int"),
}
_INDIVIDUAL_ATTRIBUTES = {
    **_STRATEGY_ATTRIBUTES,
    "queuePrefix": ("queue_prefix", "text"),
    "topicPrefix": ("topic_prefix", "text"),
    "queueSuffix": ("queue_suffix", "text"),
    "topicSuffix": ("topic_suffix", "text"),
    "useQueueForQueueMessages": ("use_queue_for_queue_messages", "bool"),
    "useQueueForTopicMessages": ("use_queue_for_topic_messages", "bool"),
    "destinationPerDurableSubscriber": ("destination_per_durable_subscriber", "bool"),
}
_STRATEGIES = {
    "shareddeadletterstrategy": (SharedDeadLetterStrategy, _STRATEGY_ATTRIBUTES),
    "individualdeadletterstrategy": (IndividualDeadLetterStrategy, _INDIVIDUAL_ATTRIBUTES),
    "discarding": (DiscardingDeadLetterStrategy, _STRATEGY_ATTRIBUTES),
    "discardingdeadletterstrategy": (DiscardingDeadLetterStrategy, _STRATEGY_ATTRIBUTES),
}
_POLICY_ENTRY_ATTRIBUTES = {"expireMessagesPeriod": ("expire_messages_period", "long"),
                            "prioritizedMessages": ("prioritized_messages", "bool"),
                            "enableAudit": ("enable_audit", "bool"),
                            "maxAuditDepth": ("max_audit_depth", "int"),
                            "maxQueueAuditDepth": ("max_queue_audit_depth", "int"),
                            "maxProducersToAudit": ("max_producers_to_audit", "int")}
_AUDIT_FIELDS = ("enable_audit", "max_audit_depth", "max_queue_audit_depth", "max_producers_to_audit")
_POLICY_ATTRIBUTES = {
    "maximumRedeliveries": ("maximum_redeliveries", "int"),
    "initialRedeliveryDelay": ("initial_redelivery_delay", "long"),
    "redeliveryDelay": ("redelivery_delay", "long"),
    "useExponentialBackOff": ("use_exponential_backoff", "bool"),
    "backOffMultiplier": ("backoff_multiplier", "double"),
    "maximumRedeliveryDelay": ("maximum_redelivery_delay", "long"),
    "useCollisionAvoidance": ("use_collision_avoidance", "bool"),
    "collisionAvoidancePercent": ("collision_avoidance_factor", "percent"),
    "redeliveryDelays": ("redelivery_delays", "delays"),        # journal_engine extension
}
_REDELIVERY_PLUGIN_ATTRIBUTES = {
    "fallbackToDeadLetter": ("fallback_to_dead_letter", "bool"),
    "sendToDlqIfMaxRetriesExceeded": ("send_to_dlq_if_max_retries_exceeded", "bool"),
}
_DISCARDING_PLUGIN_ATTRIBUTES = {
    "dropAll": ("drop_all", "bool"),
    "dropTemporaryTopics": ("drop_temporary_topics", "bool"),
    "dropTemporaryQueues": ("drop_temporary_queues", "bool"),
    "dropOnly": ("drop_only", "regexes"),
    "reportInterval": ("report_interval", "int"),
}
_DESTINATION_ATTRIBUTES = ("queue", "topic")


class _Reader:
    """One pass over the document; collects what is not implemented."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.unimplemented: list[tuple[str, int | None]] = []

    # ------------------------------------------------------------------------------- values
    def value(self, element: ElementTree.Element, path: str, attribute: str, kind: str) -> Any:
        raw = element.get(attribute, "")
        label = f"{path}/@{attribute}"
        line = line_of(element)
        text = raw.strip()
        if "${" in text:
            raise ConfigError(label, raw, "property placeholders (${...}) are not supported; write the value",
                              line=line)
        if kind == "text":
            return raw
        if kind == "bool":
            if text.lower() not in ("true", "false"):
                raise ConfigError(label, raw, "must be true or false", line=line)
            return text.lower() == "true"
        if kind in ("int", "long"):
            high = JAVA_INT_MAX if kind == "int" else JAVA_LONG_MAX
            if not _INT_RE.fullmatch(text) or not -high - 1 <= int(text) <= high:
                raise ConfigError(label, raw, f"is not an integer in [{-high - 1}, {high}]", line=line)
            return int(text)
        if kind in ("double", "percent"):
            if not _DOUBLE_RE.fullmatch(text):
                raise ConfigError(label, raw, "is not a number", line=line)
            return float(text) / 100 if kind == "percent" else float(text)
        if kind == "delays":
            words = [w for w in re.split(r"[\s,]+", text) if w]
            if not words or not all(_INT_RE.fullmatch(w) and 0 <= int(w) <= JAVA_LONG_MAX for w in words):
                raise ConfigError(label, raw, "must be delays in milliseconds (ints >= 0) separated by commas",
                                  line=line)
            return tuple(int(w) for w in words)
        if kind == "regexes":
            try:
                return compile_drop_only(raw, label)
            except ConfigError as exc:
                raise located(exc, line) from None
        raise AssertionError(f"unknown attribute kind {kind!r}")

    def fields(self, element: ElementTree.Element, path: str, attributes: dict[str, tuple[str, str]],
               also: tuple[str, ...] = ()) -> dict[str, Any]:
        """The object fields an element's attributes set; attributes not listed (nor in ``also``) are
        reported as not implemented."""
        values = {}
        for attribute in element.attrib:
            if attribute in attributes:
                name, kind = attributes[attribute]
                values[name] = self.value(element, path, attribute, kind)
            elif attribute not in also and not attribute.startswith("{"):
                report_unimplemented(element, f"{path}/@{attribute}", self.source, self.unimplemented)
        return values

    def build(self, factory, values: dict[str, Any], element: ElementTree.Element, path: str,
              attributes: dict[str, tuple[str, str]]):
        """``factory(**values)``; its ConfigError renamed after the attribute, at the element's line."""
        try:
            return factory(**values)
        except ConfigError as exc:
            attribute = next((a for a, (f, _) in attributes.items() if f == exc.field), exc.field)
            raise located(exc, line_of(element), f"{path}/@{attribute}") from None

    def skip(self, element: ElementTree.Element, path: str) -> None:
        report_unimplemented(element, path, self.source, self.unimplemented)

    # ------------------------------------------------------------------------------- the document
    def read(self, root: ElementTree.Element) -> ClassicBrokerConfig:
        broker = root if local_name(root) == "broker" else None
        if broker is None:
            for child in _elements(root):
                if local_name(child) == "broker" and broker is None:
                    broker = child
                else:
                    self.skip(child, f"beans/{_tag(child)}")
        if broker is None:
            raise ConfigError(self.source, "<beans>", "holds no <broker> element", line=line_of(root),
                              hint="an activemq.xml configures its broker in <broker>")
        scheduler = self.fields(broker, "broker", {"schedulerSupport": ("scheduler_support", "bool")})
        config: dict[str, Any] = {"source": self.source, **scheduler}
        for child in _elements(broker):
            name = local_name(child)
            if name == "destinationpolicy":
                self.destination_policy(child, config)
            elif name == "plugins":
                self.plugins(child, config)
            else:
                self.skip(child, f"broker/{_tag(child)}")
        return self.build(ClassicBrokerConfig, config, broker, "broker", {"schedulerSupport": ("scheduler_support", "")})

    def destination_policy(self, element: ElementTree.Element, config: dict[str, Any]) -> None:
        strategies = ClassicDestinationMap()
        periods = ClassicDestinationMap()
        prioritized = ClassicDestinationMap()
        audits = ClassicDestinationMap()
        for policy_map in _elements(element):
            if local_name(policy_map) != "policymap":
                self.skip(policy_map, f"destinationPolicy/{_tag(policy_map)}")
                continue
            for part in _elements(policy_map):
                part_name = local_name(part)
                if part_name == "policyentries":
                    for entry in _elements(part):
                        if local_name(entry) != "policyentry":
                            self.skip(entry, f"policyEntries/{_tag(entry)}")
                            continue
                        kind, pattern = self.destination(entry, "policyEntry")
                        strategy, period, ordered, audit = self.policy_entry(entry)
                        if strategy is not None:
                            self.put(strategies, kind, pattern, strategy, entry, "policyEntry")
                        self.put(periods, kind, pattern, period, entry, "policyEntry")
                        self.put(prioritized, kind, pattern, ordered, entry, "policyEntry")
                        self.put(audits, kind, pattern, audit, entry, "policyEntry")
                elif part_name == "defaultentry":
                    for entry in _elements(part):
                        if local_name(entry) != "policyentry":
                            self.skip(entry, f"defaultEntry/{_tag(entry)}")
                            continue
                        (strategy, config["default_expire_messages_period"],
                         config["default_prioritized_messages"], config["default_audit"]) = self.policy_entry(
                            entry, default=True)
                        if strategy is not None:
                            config["default_strategy"] = strategy
                else:
                    self.skip(part, f"policyMap/{_tag(part)}")
        config["strategies"] = strategies
        config["expire_messages_periods"] = periods
        config["prioritized_messages"] = prioritized
        config["audits"] = audits

    def destination(self, element: ElementTree.Element, path: str) -> tuple[str, str]:
        given = [a for a in _DESTINATION_ATTRIBUTES if a in element.attrib]
        if len(given) != 1:
            raise ConfigError(path, dict(element.attrib), "needs exactly one of queue=\"...\" or topic=\"...\"",
                              line=line_of(element))
        pattern = element.get(given[0], "")
        try:
            for part in pattern.split(","):
                check_pattern(part.strip(), f"{path}/@{given[0]}")
        except ConfigError as exc:
            raise located(exc, line_of(element)) from None
        return (QUEUE if given[0] == "queue" else TOPIC), pattern

    def put(self, mapping: ClassicDestinationMap, kind: str, pattern: str, value, element, path: str) -> None:
        try:
            mapping.put(kind, pattern, value, f"{path}/@{kind}")
        except ConfigError as exc:
            raise located(exc, line_of(element)) from None

    def policy_entry(self, entry: ElementTree.Element, *, default: bool = False
                     ) -> tuple[DeadLetterStrategy | None, int, bool, AuditPolicy]:
        """The dead-letter strategy a policy entry sets (None: it sets none), its expiry scan's period,
        its prioritizedMessages and its producer audit (PolicyEntry's defaults when it sets none)."""
        path = "defaultEntry/policyEntry" if default else "policyEntry"
        values = self.fields(entry, path, _POLICY_ENTRY_ATTRIBUTES, also=_DESTINATION_ATTRIBUTES)
        audit = self.build(AuditPolicy, {name: values[name] for name in _AUDIT_FIELDS if name in values}, entry,
                           path, _POLICY_ENTRY_ATTRIBUTES)
        period = values.get("expire_messages_period", EXPIRE_MESSAGES_PERIOD_MS_DEFAULT)
        prioritized = values.get("prioritized_messages", False)
        strategy = None
        for child in _elements(entry):
            if local_name(child) != "deadletterstrategy":
                self.skip(child, f"{path}/{_tag(child)}")
                continue
            chosen = list(_elements(child))
            if len(chosen) != 1 or local_name(chosen[0]) not in _STRATEGIES:
                found = ", ".join(f"<{_tag(c)}>" for c in chosen) or "nothing"
                raise ConfigError(f"{path}/deadLetterStrategy", found,
                                  "must hold one of <sharedDeadLetterStrategy>, <individualDeadLetterStrategy>, "
                                  "<discarding>", line=line_of(chosen[0] if chosen else child))
            strategy = self.strategy(chosen[0], f"{path}/deadLetterStrategy/{_tag(chosen[0])}")
        return strategy, period, prioritized, audit

    def strategy(self, element: ElementTree.Element, path: str) -> DeadLetterStrategy:
        factory, attributes = _STRATEGIES[local_name(element)]
        values = self.fields(element, path, attributes)
        for child in _elements(element):
            if factory is SharedDeadLetterStrategy and local_name(child) == "deadletterqueue":
                queues = [q for q in _elements(child) if local_name(q) == "queue"]
                if len(queues) != 1 or not queues[0].get("physicalName"):
                    raise ConfigError(f"{path}/deadLetterQueue", "<deadLetterQueue>",
                                      'must hold one <queue physicalName="..."/>', line=line_of(child))
                values["dead_letter_queue"] = queues[0].get("physicalName")
            else:
                self.skip(child, f"{path}/{_tag(child)}")
        return self.build(factory, values, element, path, attributes)

    def plugins(self, element: ElementTree.Element, config: dict[str, Any]) -> None:
        for plugin in _elements(element):
            name = local_name(plugin)
            if name == "redeliveryplugin":
                config["redelivery_plugin"] = self.redelivery_plugin(plugin)
            elif name == "discardingdlqbrokerplugin":
                path = "plugins/discardingDLQBrokerPlugin"
                values = self.fields(plugin, path, _DISCARDING_PLUGIN_ATTRIBUTES)
                for child in _elements(plugin):
                    self.skip(child, f"{path}/{_tag(child)}")
                config["discarding_plugin"] = self.build(DiscardingDLQPlugin, values, plugin, path,
                                                         _DISCARDING_PLUGIN_ATTRIBUTES)
            else:
                self.skip(plugin, f"plugins/{_tag(plugin)}")

    def redelivery_plugin(self, plugin: ElementTree.Element) -> RedeliveryPlugin:
        path = "plugins/redeliveryPlugin"
        values = self.fields(plugin, path, _REDELIVERY_PLUGIN_ATTRIBUTES)
        policies = ClassicDestinationMap()
        default = None
        for holder in _elements(plugin):
            if local_name(holder) != "redeliverypolicymap":
                self.skip(holder, f"{path}/{_tag(holder)}")
                continue
            # the property element <redeliveryPolicyMap> holds the bean <redeliveryPolicyMap>; accept either
            maps = [m for m in _elements(holder) if local_name(m) == "redeliverypolicymap"] or [holder]
            for policy_map in maps:
                for part in _elements(policy_map):
                    part_name = local_name(part)
                    if part_name == "redeliverypolicymap":
                        continue
                    if part_name not in ("redeliverypolicyentries", "defaultentry"):
                        self.skip(part, f"redeliveryPolicyMap/{_tag(part)}")
                        continue
                    for entry in _elements(part):
                        if local_name(entry) != "redeliverypolicy":
                            self.skip(entry, f"redeliveryPolicyMap/{_tag(part)}/{_tag(entry)}")
                            continue
                        if part_name == "defaultentry":
                            default = self.redelivery_policy(entry, "defaultEntry/redeliveryPolicy")
                        else:
                            kind, pattern = self.destination(entry, "redeliveryPolicy")
                            policy = self.redelivery_policy(entry, "redeliveryPolicy")
                            self.put(policies, kind, pattern, policy, entry, "redeliveryPolicy")
        return self.build(RedeliveryPlugin, {"policies": policies, "default_entry": default, **values}, plugin, path,
                          _REDELIVERY_PLUGIN_ATTRIBUTES)

    def redelivery_policy(self, element: ElementTree.Element, path: str) -> ClassicRedeliveryPolicy:
        values = self.fields(element, path, _POLICY_ATTRIBUTES, also=_DESTINATION_ATTRIBUTES)
        for child in _elements(element):
            self.skip(child, f"{path}/{_tag(child)}")
        return self.build(ClassicRedeliveryPolicy, values, element, path, _POLICY_ATTRIBUTES)


def _elements(element: ElementTree.Element):
    return (child for child in element if isinstance(child.tag, str))


def _tag(element: ElementTree.Element) -> str:
    """The element's name as written (without its namespace)."""
    return element.tag.rsplit("}", 1)[-1]


def read_classic_document(root: ElementTree.Element, label: str) -> tuple[ClassicBrokerConfig,
                                                                            list[tuple[str, int | None]]]:
    """The ClassicBrokerConfig of a parsed activemq.xml, and what it holds that is not implemented."""
    reader = _Reader(label)
    return reader.read(root), reader.unimplemented


def classic_config(root: ElementTree.Element, label: str) -> BrokerConfig:
    """The reader of ``journal_engine.config.load`` for an activemq.xml (root ``<beans>`` or ``<broker>``)."""
    classic, unimplemented = read_classic_document(root, label)
    return BrokerConfig(AddressSettingsRepository(), source=label, system="classic", classic=classic,
                        unimplemented=unimplemented)
