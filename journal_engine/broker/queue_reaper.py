"""Queues deleted once unused: Artemis's AddressQueueReaper (PostOfficeImpl.reapAddresses).

A queue is created auto-deleting or not, by its address's settings at that moment
(QueueConfigurationUtils.applyDynamicQueueDefaults): an auto-created queue (a dead-letter or expiry
resource) by ``auto_delete_queues`` (default true), any other by ``auto_delete_created_queues``
(default false); with it go ``auto_delete_queues_delay`` and ``auto_delete_queues_message_count``.
Every ``address-queue-scan-period`` the reaper looks at each auto-deleting queue: with no consumer, its
last consumer gone at least the delay ago, at most the message count of messages (-1: any number), and
used (a message acknowledged, expired or dead-lettered, or a consumer gone), the queue is marked swept;
a queue found so at two scans in a row is deleted with its messages (logged at INFO as Artemis's
AMQ224112); one that is not is unmarked. Why a module of its own: the rule is Artemis's, apart from
routing and delivery, and runs on its own timer.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from .artemis.address_settings import AddressSettings
from .post_office import PostOffice
from .queue import QueueState
from .timers import NEVER_MS

__all__ = ["AutoDelete", "apply_auto_delete", "reap_queues"]

log = logging.getLogger("journal_engine.broker")


@dataclass(frozen=True, slots=True)
class AutoDelete:
    """An auto-deleting queue's two thresholds, fixed when it was created."""

    delay_ms: int
    message_count: int          # -1: any number


def apply_auto_delete(queue: QueueState, settings: AddressSettings) -> None:
    """Make ``queue`` auto-deleting or not by its address's resolved ``settings`` (module docstring)."""
    deleting = settings.auto_delete_queues if queue.auto_created else settings.auto_delete_created_queues
    queue.auto_delete = (AutoDelete(settings.auto_delete_queues_delay, settings.auto_delete_queues_message_count)
                         if deleting else None)


def _deletable(queue: QueueState, rule: AutoDelete, now: int) -> bool:
    """reapAddresses' test of one queue (consumerCountCheck, delayCheck, messageCountCheck, queueWasUsed);
    a queue with messages in delivery or in open transactions is not deleted here."""
    return (queue.consumers == 0 and not queue.delivering and not queue.pending_sends
            and now - queue.consumer_removed_ms >= rule.delay_ms
            and (rule.message_count == -1 or queue.count <= rule.message_count)
            and (queue.messages_expired > 0 or queue.messages_acknowledged > 0 or queue.messages_killed > 0
                 or queue.consumer_removed_ms != -1))


def reap_queues(post_office: PostOffice, now: int) -> int | None:
    """One scan of the reaper (module docstring). Lock held. Returns None when it marked or deleted a
    queue (the next scan has work), else the earliest time a waiting queue's delay runs out (NEVER_MS
    when none waits): scans before it would find the same, and can be skipped."""
    changed = False
    wake_ms = NEVER_MS
    for queue in list(post_office.queues.values()):
        rule = queue.auto_delete
        if rule is not None and _deletable(queue, rule, now):
            if queue.swept:
                log.info("AMQ224112: Auto removing queue %s with queueID=%d on address=%s (%d messages)",
                         queue.name, queue.queue_id, queue.address, queue.count)
                post_office.delete_queue(queue)
            else:
                queue.swept = True
            changed = True
        else:
            changed = changed or queue.swept
            queue.swept = False
            if rule is not None and queue.consumers == 0 and now - queue.consumer_removed_ms < rule.delay_ms:
                wake_ms = min(wake_ms, queue.consumer_removed_ms + rule.delay_ms)
    return None if changed else wake_ms
