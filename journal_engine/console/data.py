"""What the console shows, read from a running broker or from a stopped broker's directory.

Two sources answer the same questions (the queues, a page of a queue's messages, one message, the
dead letters, the address settings and where each value came from, the journal's health):

* :class:`LiveSource` asks the served broker's :class:`~journal_engine.Broker`, on its event loop.
  Every call is bounded (``Broker.browse_page`` walks at most CONSOLE_BROWSE_SCAN_MAX references), so
  the loop is never held for long whatever a queue holds; the journal's health is read from its files
  in a worker thread, as ``journal-engine stats`` and ``verify`` read them, without the broker.
* :class:`StoredSource` reads a stopped broker's directory once, read-only, the way ``journal-engine
  dlq list`` does (``MessageStore(read_only=True)`` through cli/target.py): nothing is written,
  truncated or created, and a directory a broker is writing is read as those commands read it (a
  journal without a lock, an LMDB store through its reader table). It cannot redrive or delete.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from itertools import islice

from ..broker.artemis.address_settings import AddressSettings
from ..broker.dead_letter import (DEAD_LETTER_COUNT, DEAD_LETTER_REASON, DEAD_LETTER_TIME, DELIVERY_HISTORY,
                                  ORIG_DELIVERY_COUNT, decode_history)
from ..broker.message import HEADER_NAMES, filter_headers
from ..broker.redrive import REDRIVE_COUNT, REDRIVE_SOURCE, REDRIVE_TIME, dead_letter_origin
from ..broker.selector import Selector
from ..cli.damage import damage_in
from ..cli.inspection import verify_part
from ..cli.target import Target, locate
from ..errors import CorruptRecordError, UnknownQueueError
from ..limits import CONSOLE_BODY_PREVIEW_BYTES, CONSOLE_DEAD_LETTERS_MAX

_LISTED_BODY_BYTES = 256       # a list shows the start of a body; a message's own page up to the preview
from ..record_format import REPLACEABLE_TYPES, FrameCheck, RecordKind
from ..storage.journal.format import CHECKPOINT_FILE, HEADER_FLAG_COMPACTED
from ..storage.journal.recovery import analyze

__all__ = ["QueueRow", "MessageView", "Page", "LiveSource", "StoredSource", "SettingRow", "journal_health",
           "dead_letter_of", "group_dead_letters"]

_RECORD_KINDS = frozenset((RecordKind.ADD, RecordKind.UPDATE, RecordKind.ADD_TX, RecordKind.UPDATE_TX))
_ENDS = {FrameCheck.ZERO: "clean", FrameCheck.VALID: "full", FrameCheck.FOREIGN: "an older file's bytes (clean)",
         FrameCheck.INVALID: "damaged or torn"}
_SETTINGS_FIELDS = [f.name for f in dataclasses.fields(AddressSettings)]


@dataclass
class QueueRow:
    """One queue's counts (QueueInfo's, or a stopped broker's as its store holds them)."""

    name: str
    address: str
    routing_type: str
    filter: str | None
    depth: int
    scheduled: int
    delivering: int
    consumers: int
    added: int
    acknowledged: int
    killed: int
    expired: int
    dead_letter_queue: bool = False
    delivered: int = 0
    redelivered: int = 0
    rolled_back: int = 0
    dead_letters: dict | None = None       # messages dead-lettered by reason (the running broker's)


@dataclass
class MessageView:
    """A message as a page shows it. ``position``: its place among the queue's references."""

    message_id: int
    queue: str
    address: str
    position: int
    delivery_count: int
    scheduled_time: int
    priority: int
    durable: bool
    expiration: int
    properties: dict
    body: bytes                 # at most CONSOLE_BODY_PREVIEW_BYTES
    body_size: int
    dead_letter: dict | None = None     # dead_letter_of(properties), when it is one

    def body_text(self) -> str | None:
        """The body as UTF-8 text, or None when it is not text (a preview cut inside a character drops it)."""
        cut = len(self.body) < self.body_size
        for end in range(len(self.body), max(len(self.body) - 4, -1) if cut else len(self.body) - 1, -1):
            try:
                return self.body[:end].decode("utf-8")
            except UnicodeDecodeError:
                continue
        return None

    def body_json(self) -> str | None:
        """The body pretty-printed, when it is a JSON document."""
        text = self.body_text()
        if text is None or self.body_size > len(self.body):
            return None
        try:
            return json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False)
        except ValueError:
            return None

    def body_hex(self) -> list[tuple[int, str, str]]:
        """(offset, hex bytes, printable characters), 16 bytes a row, as ``hexdump -C`` shows them."""
        rows = []
        for offset in range(0, min(len(self.body), 4096), 16):
            chunk = self.body[offset:offset + 16]
            rows.append((offset, " ".join(f"{byte:02x}" for byte in chunk),
                         "".join(chr(byte) if 32 <= byte < 127 else "." for byte in chunk)))
        return rows


@dataclass
class Page:
    """A page of a queue's messages: where it started, where the next one starts, whether more follow."""

    queue: str
    start: int
    messages: list
    next_start: int
    more: bool
    filter: str | None = None


@dataclass
class SettingRow:
    """One merged address setting: its value and where it came from."""

    name: str
    value: object
    match: str | None           # the address-setting match that set it; None: the default
    origin: str                 # which configuration (file, or the server's options)


def dead_letter_of(properties: dict | None) -> dict | None:
    """What a dead-letter copy says of itself (docs/cli.md, "Dead letters and redrive"), or None when the
    message is no dead letter (a redriven message is none until it is dead-lettered again)."""
    properties = properties or {}
    origin = dead_letter_origin(properties)
    if origin is None:
        return None
    orig_address, orig_queue, orig_id = origin
    dead_letter_count = properties.get(DEAD_LETTER_COUNT)
    history = decode_history(properties.get(DELIVERY_HISTORY))
    attempts = []
    previous = None
    for number, entry in enumerate(history, 1):
        at = entry.get("time")
        delay = at - previous if isinstance(at, int) and isinstance(previous, int) else None
        attempts.append({"attempt": number, "time": at, "reason": entry.get("reason"), "delay_ms": delay,
                         **{k: v for k, v in entry.items() if k not in ("time", "reason")}})
        previous = at
    return {"reason": properties.get(DEAD_LETTER_REASON) or "unknown", "time": properties.get(DEAD_LETTER_TIME),
            "original_address": orig_address, "original_queue": orig_queue, "original_message_id": orig_id,
            "delivery_count": properties.get(ORIG_DELIVERY_COUNT), "dead_letter_count": dead_letter_count,
            "history": attempts, "redrive_count": properties.get(REDRIVE_COUNT, 0),
            "last_redrive_at": properties.get(REDRIVE_TIME), "last_redrive_source": properties.get(REDRIVE_SOURCE)}


def group_dead_letters(messages: list[MessageView]) -> list[dict]:
    """Dead letters grouped by (reason, original queue): count, oldest and newest dead-letter time."""
    groups: dict[tuple, dict] = {}
    for message in messages:
        info = message.dead_letter
        if info is None:
            continue
        key = (info["reason"], info["original_queue"] or info["original_address"] or "?")
        group = groups.setdefault(key, {"reason": key[0], "origin": key[1], "count": 0, "first": None, "last": None,
                                        "times": []})
        group["count"] += 1
        at = info["time"]
        if isinstance(at, int):
            group["times"].append(at)
            group["first"] = at if group["first"] is None else min(group["first"], at)
            group["last"] = at if group["last"] is None else max(group["last"], at)
    return sorted(groups.values(), key=lambda group: (-group["count"], group["reason"], group["origin"]))


class LiveSource:
    """The served broker's state, asked on its event loop (see the module docstring).

    ``settings_origins``: for each address-setting match, the configuration that set it (the server's
    options, a broker.xml); ``dead_letter_queue``: the server's dead-letter queue, listed among the DLQs
    even while empty."""

    read_only = False

    def __init__(self, broker, *, settings_origins: dict[str, str] | None = None,
                 dead_letter_queue: str | None = None) -> None:
        self.broker = broker
        self.directory = broker.directory
        self.settings_origins = dict(settings_origins or {})
        self.dead_letter_queue = dead_letter_queue

    def queue_names(self) -> list[str]:
        return self.broker.queue_names()

    def _dead_letter_addresses(self) -> set[str]:
        addresses = {self.dead_letter_queue} if self.dead_letter_queue else set()
        for _match, settings in self.broker.address_settings.items():
            for name in ("dead_letter_address", "expiry_address"):
                value = getattr(settings, name)
                if value:
                    addresses.add(value)
        return addresses

    def queues(self) -> list[QueueRow]:
        dead_letter_addresses = self._dead_letter_addresses()
        rows = []
        for info in self.broker.queue_infos():     # every queue's counts under one hold of the lock
            rows.append(QueueRow(info.name, info.address, info.routing_type, info.filter, info.message_count,
                                 info.scheduled_count, info.delivering_count, info.consumer_count, info.messages_added,
                                 info.messages_acknowledged, info.messages_killed, info.messages_expired,
                                 info.address in dead_letter_addresses or info.name in dead_letter_addresses,
                                 info.messages_delivered, info.messages_redelivered, info.messages_rolled_back,
                                 dict(info.dead_letters)))
        return rows

    def page(self, queue: str, start: int, limit: int, filter: str | None) -> Page:
        found = self.broker.browse_page(queue, start=start, limit=limit, filter=filter)
        return Page(found.queue, start, [self._view(position, message, _LISTED_BODY_BYTES)
                                         for position, message in found.messages], found.next_start, found.more, filter)

    def scheduled(self, queue: str, limit: int) -> tuple[list[MessageView], bool]:
        """The queue's scheduled messages, soonest first (at most ``limit``; Broker.browse_scheduled's
        bounded walk); whether the schedule held more than was looked at."""
        found, more = self.broker.browse_scheduled(queue, limit=limit)
        views = []
        for due_ms, message in found:
            view = self._view(-1, message, _LISTED_BODY_BYTES)
            view.scheduled_time = due_ms
            views.append(view)
        return views, more

    def message(self, queue: str, message_id: int, near: int = 0) -> MessageView | None:
        """The message of that id in the queue, looked for around position ``near`` first."""
        selector = f"AMQMessageID = {int(message_id)}"
        for start in dict.fromkeys((max(0, near - 1), 0)):
            page = self.broker.browse_page(queue, start=start, limit=1, filter=selector)
            if page.messages:
                return self._view(*page.messages[0])
        return None

    def _view(self, position: int, message, body_bytes: int = CONSOLE_BODY_PREVIEW_BYTES) -> MessageView:
        body = message.body
        properties = dict(message.properties or {})
        return MessageView(message.message_id, message.queue, message.address, position, message.delivery_count, 0,
                           message.priority, message.durable, message.expiration, properties,
                           bytes(body[:body_bytes]), len(body), dead_letter_of(properties))

    def dead_letters(self, queue: str, filter: str | None = None) -> tuple[list[MessageView], bool]:
        """The dead letters of a queue from its head, at most CONSOLE_DEAD_LETTERS_MAX of them (the
        selector's walk bounded as every browse is); (messages, whether more may follow)."""
        page = self.broker.browse_page(queue, start=0, limit=CONSOLE_DEAD_LETTERS_MAX, filter=filter,
                                       scan_max=CONSOLE_DEAD_LETTERS_MAX)
        views = [self._view(position, message, 0) for position, message in page.messages]
        return [view for view in views if view.dead_letter is not None], page.more

    def settings(self, address: str) -> list[SettingRow]:
        """Every address setting of ``address`` merged, each with the match that set it and its origin."""
        repository = self.broker.address_settings
        keys = repository.matching_keys(address)
        values = repository.matches(address)
        merged = repository.get(address)
        rows = []
        for name in _SETTINGS_FIELDS:
            match = next((key for key, value in zip(keys, values) if getattr(value, name) is not None), None)
            origin = (self.settings_origins.get(match, "set by the embedding program") if match is not None
                      else "the default")
            rows.append(SettingRow(name, getattr(merged, name), match, origin))
        return rows

    def redrive(self, queue: str, *, to_queue: str | None, filter: str | None, message_ids, max_redrives: int):
        return self.broker.redrive(queue, to_queue=to_queue or None, filter=filter, message_ids=message_ids,
                                   max_redrives=max_redrives)

    def delete(self, queue: str, *, filter: str | None, message_ids) -> list[int]:
        return self.broker.delete_messages(queue, message_ids=message_ids, filter=filter)


class StoredSource:
    """A stopped broker's directory, read once, read-only (see the module docstring). ``reload()``
    reads it again."""

    read_only = True

    def __init__(self, directory: str) -> None:
        self.target: Target = locate(directory)
        if not self.target.store:
            from ..cli.target import NoJournalError
            raise NoJournalError(self.target.path, "not a broker directory (the console reads a message store: "
                                                   "messages/ and bindings/)")
        self.directory = self.target.path
        self.settings_origins: dict[str, str] = {}
        self.loaded_at = 0.0
        self.reload()

    def reload(self) -> None:
        with self.target.open_store() as store:
            state = store.load()
        now = int(time.time() * 1000)
        self.damage = [place for name, report in sorted(state.reports.items()) for place in damage_in(name, report)]
        self._queues: dict[str, tuple] = {}
        for queue_id, binding in state.queues.items():
            references = list(state.references.get(queue_id, ()))
            self._queues[binding.name] = (binding, references)
        self._messages = state.messages
        self.loaded_at = time.time()
        self._now = now

    def queue_names(self) -> list[str]:
        return sorted(self._queues)

    def _entry(self, queue: str):
        try:
            return self._queues[queue]
        except KeyError:
            raise UnknownQueueError(queue) from None

    def queues(self) -> list[QueueRow]:
        rows = []
        for name in sorted(self._queues):
            binding, references = self._queues[name]
            scheduled = sum(1 for ref in references if ref.scheduled_delivery_time > self._now)
            dead = any(dead_letter_of(self._messages[ref.message_id].properties) is not None
                       for ref in islice(references, 100))
            rows.append(QueueRow(name, binding.address, binding.routing_type, binding.filter, len(references),
                                 scheduled, 0, 0, 0, 0, 0, 0, dead))
        return rows

    def _matching(self, queue: str, filter: str | None):
        _binding, references = self._entry(queue)
        selector = Selector(filter) if filter is not None and filter.strip() else None
        for position, ref in enumerate(references):
            message = self._messages[ref.message_id]
            if selector is not None:
                headers = (filter_headers(message.message_id, message.address, message.durable, message.expiration,
                                    len(message.body)) if selector.identifiers & HEADER_NAMES else None)
                if not selector.matches(message.properties, headers):
                    continue
            yield position, ref, message

    def page(self, queue: str, start: int, limit: int, filter: str | None) -> Page:
        _binding, references = self._entry(queue)
        found = []
        next_start = len(references)
        for position, ref, message in self._matching(queue, filter):
            if position < start:
                continue
            if len(found) >= limit:
                next_start = position
                break
            found.append(self._view(queue, position, ref, message, _LISTED_BODY_BYTES))
        return Page(queue, start, found, next_start, next_start < len(references), filter)

    def scheduled(self, queue: str, limit: int) -> tuple[list[MessageView], bool]:
        """The queue's references whose scheduled time was still ahead when the directory was read."""
        _binding, references = self._entry(queue)
        found = sorted(((ref.scheduled_delivery_time, position, ref) for position, ref in enumerate(references)
                        if ref.scheduled_delivery_time > self._now), key=lambda entry: (entry[0], entry[1]))
        return [self._view(queue, position, ref, self._messages[ref.message_id], _LISTED_BODY_BYTES)
                for _due, position, ref in found[:limit]], len(found) > limit

    def message(self, queue: str, message_id: int, near: int = 0) -> MessageView | None:
        for position, ref, message in self._matching(queue, None):
            if message.message_id == message_id:
                return self._view(queue, position, ref, message)
        return None

    def _view(self, queue: str, position: int, ref, message, body_bytes: int = CONSOLE_BODY_PREVIEW_BYTES) -> MessageView:
        properties = dict(message.properties or {})
        body = message.body
        return MessageView(message.message_id, queue, message.address, position, ref.delivery_count,
                           ref.scheduled_delivery_time, message.priority, message.durable, message.expiration,
                           properties, bytes(body[:body_bytes]), len(body), dead_letter_of(properties))

    def dead_letters(self, queue: str, filter: str | None = None) -> tuple[list[MessageView], bool]:
        views = [self._view(queue, position, ref, message, 0) for position, ref, message in self._matching(queue, filter)]
        return [view for view in views if view.dead_letter is not None], False

    def settings(self, address: str) -> list[SettingRow]:
        return []       # address settings live in the server's configuration, not in its store


def _checkpoint_state(path: str, taken_by_a_writer: bool) -> dict:
    """Whether the directory holds a checkpoint, and what that means (storage/journal/checkpoint.py)."""
    file = os.path.join(path, CHECKPOINT_FILE)
    try:
        status = os.stat(file)
    except FileNotFoundError:
        return {"present": False, "note": "none: the running broker took it at its load, and a clean close saves "
                                          "the next" if taken_by_a_writer else
                "none: the last close was not clean (a crash), so the next load decodes every file"}
    return {"present": True, "bytes": status.st_size, "saved_at": int(status.st_mtime * 1000),
            "note": "saved by a clean close: the next load takes every file's columns from it"}


def _journal_files(part_path: str) -> tuple[list[dict], list]:
    """Each data file of a journal with its written, live and dead bytes; the damage the analysis found.
    A file's live bytes are those of its frames whose records are still live (an update's too)."""
    analysis = analyze(part_path, REPLACEABLE_TYPES if part_path.endswith("messages") else (),
                       as_if_compacted=True)
    live_ids = set(analysis.state.records)
    files = []
    from ..cli.target import journal_frames
    frames_of = {data.path: frames for data, frames in journal_frames(part_path)}
    for data, (end, check) in zip(analysis.listing.data, analysis.ends):
        frames = frames_of.get(data.path, [])
        live = 0
        for index, (offset, frame_check, kind, _type, record_id, _tx, _body) in enumerate(frames):
            if frame_check != FrameCheck.VALID:
                continue
            following = frames[index + 1][0] if index + 1 < len(frames) else end
            if kind in _RECORD_KINDS and record_id in live_ids:
                live += following - offset
        written = max(0, end - data.header.data_start)
        files.append({"path": data.path, "name": os.path.basename(data.path), "file_id": data.header.file_id,
                      "sequence": data.header.sequence, "size": data.size, "written": written, "live": live,
                      "dead": max(0, written - live), "compacted": bool(data.header.flags & HEADER_FLAG_COMPACTED),
                      "modified_at": int(os.stat(data.path).st_mtime * 1000), "end": _ENDS.get(check, str(check))})
    return files, [place.as_dict() for place in damage_in(os.path.basename(part_path), analysis.report)]


def journal_health(directory: str, *, live_writer: bool) -> dict:
    """Files, live and dead bytes per file, the last compaction, the damage ``verify`` finds and the
    checkpoint's state of a broker directory; read-only (it runs in a worker thread beside a live broker,
    reading its files as ``journal-engine stats`` does)."""
    target = locate(directory)
    parts = []
    problems: list = []
    notes: list = []
    for part in target.parts:
        entry: dict = {"name": part.name, "path": part.path, "backend": part.backend.name, "files": [],
                       "checkpoint": None}
        if part.backend.frames:
            try:
                entry["files"], _damage = _journal_files(part.path)
            except CorruptRecordError as error:
                entry["error"] = str(error)
            entry["checkpoint"] = _checkpoint_state(part.path, live_writer)
            compacted = [file["modified_at"] for file in entry["files"] if file["compacted"]]
            entry["last_compaction"] = max(compacted) if compacted else None
        else:
            entry["note"] = part.backend.compaction_note
        verify_part(part, problems, notes)
        parts.append(entry)
    totals = Counter()
    for entry in parts:
        for file in entry["files"]:
            totals.update({"written": file["written"], "live": file["live"], "dead": file["dead"],
                           "files": 1})
    return {"directory": target.path, "backend": target.backend.name, "parts": parts, "problems": problems,
            "notes": notes, "totals": dict(totals), "read_at": int(time.time() * 1000)}

