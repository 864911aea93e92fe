"""The address rules both STOMP servers (``serve-stomp`` and the coilmq engine) give their broker.

Their options say one thing for every queue: how many deliveries a message gets, how long a
redelivery waits, and where a message goes that runs out of deliveries or expires. The dead-letter
queue itself keeps what reaches it (no limit, no dead-letter address of its own).
"""
from __future__ import annotations

from ..broker.artemis.address_settings import AddressSettings, AddressSettingsRepository


def add_server_rules(settings: AddressSettingsRepository, *, max_delivery_attempts: int, redelivery_delay_ms: int,
                     dead_letter_queue: str | None) -> None:
    settings.add("#", AddressSettings(max_delivery_attempts=max_delivery_attempts, redelivery_delay=redelivery_delay_ms,
                                      dead_letter_address=dead_letter_queue, expiry_address=dead_letter_queue))
    if dead_letter_queue is not None:
        settings.add(dead_letter_queue, AddressSettings(max_delivery_attempts=-1))
