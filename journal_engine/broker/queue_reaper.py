"""Queues deleted once unused: Artemis's AddressQueueReaper (PostOfficeImpl.reapAddresses).

A queue is created auto-deleting or not, by its address's settings at that moment
(QueueConfigurationUtils.applyDynamicQueueDefaults): an auto-created queue (a dead-letter or expiry
resource) by ``auto_delete_queues`` (default true), any other by ``auto_delete_created_queues``
(default false); with it go ``auto_delete_queues_delay`` and ``auto_delete_queues_message_count``. The
store keeps that rule with the queue's binding, as Artemis's does, so a restart does not change it.
Every ``address-queue-scan-period`` the reaper looks at each auto-deleting queue: with no consumer, its
last consumer gone at least the delay ago, at most the message count of messages (-1: any number), and
used (a message acknowledged, expired or dead-lettered, or a consumer gone), the queue is marked swept;
a queue found so at two scans in a row is deleted with its messages (logged at INFO as Artemis's
AMQ224112); one that is not is unmarked. With ``auto_delete_queues_skip_usage_check`` (its address's
setting when the scan runs) a queue counts as used and its delay runs from its creation
(QueueManagerImpl.delayCheck). At start-up the broker runs the pass once without the delay and the usage
(``reapAddresses(true)``): an auto-deleting queue within its message count is deleted at once when empty,
marked otherwise. Why a module of its own: the rule is Artemis's, apart from routing and delivery, and
runs on its own timer.
"""
from __future__ import annotations

import logging

from .artemis.address_settings import AddressSettings
from .post_office import PostOffice
from .queue import AutoDelete, QueueState
from .timers import NEVER_MS

__all__ = ["auto_delete_rule", "reap_queues"]

log = logging.getLogger("journal_engine.broker")


def auto_delete_rule(settings: AddressSettings, auto_created: bool) -> AutoDelete | None:
    """The auto-delete rule a queue gets when it is created at an address with resolved ``settings``
    (module docstring); None: it is never deleted by the reaper."""
    deleting = settings.auto_delete_queues if auto_created else settings.auto_delete_created_queues
    return AutoDelete(settings.auto_delete_queues_delay, settings.auto_delete_queues_message_count) if deleting else None


def _deletable(queue: QueueState, rule: AutoDelete, now: int, skip_usage_check: bool, initial: bool) -> bool:
    """reapAddresses' test of one queue (consumerCountCheck, delayCheck, messageCountCheck, queueWasUsed;
    the start-up pass only the first and the third); a queue with messages in delivery or in open
    transactions is not deleted here."""
    if queue.consumers or queue.delivering or queue.pending_sends or not (
            rule.message_count == -1 or queue.count <= rule.message_count):
        return False
    if initial:
        return True
    since = queue.created_ms if skip_usage_check else queue.consumer_removed_ms
    return now - since >= rule.delay_ms and (
        skip_usage_check or queue.messages_expired > 0 or queue.messages_acknowledged > 0
        or queue.messages_killed > 0 or queue.consumer_removed_ms != -1)


def reap_queues(post_office: PostOffice, now: int, *, initial: bool = False) -> int | None:
    """One scan of the reaper (module docstring; ``initial``: the start-up pass). Lock held. Returns None
    when it marked or deleted a queue (the next scan has work), else the earliest time a waiting queue's
    delay runs out (NEVER_MS when none waits): scans before it would find the same, and can be skipped."""
    changed = False
    wake_ms = NEVER_MS
    settings_of = post_office.address_settings.get
    for queue in list(post_office.queues.values()):
        rule = queue.auto_delete
        skip_usage_check = rule is not None and settings_of(queue.address).auto_delete_queues_skip_usage_check
        if rule is not None and _deletable(queue, rule, now, skip_usage_check, initial):
            if queue.swept or (initial and queue.count == 0):
                log.info("AMQ224112: Auto removing queue %s with queueID=%d on address=%s (%d messages)",
                         queue.name, queue.queue_id, queue.address, queue.count)
                post_office.delete_queue(queue)
            else:
                queue.swept = True
            changed = True
        else:
            changed = changed or queue.swept
            queue.swept = False
            if rule is not None and queue.consumers == 0:
                since = queue.created_ms if skip_usage_check else queue.consumer_removed_ms
                if now - since < rule.delay_ms:
                    wake_ms = min(wake_ms, since + rule.delay_ms)
    return None if changed else wake_ms
