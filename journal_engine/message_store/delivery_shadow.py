"""Delivery counts that outlive a killed process without a system call per dispatch.

With ``persist_delivery_count_before_delivery`` (and without ``strict_delivery_sync``) the count of
a dispatch must survive a killed process before the message is handed out. Writing the journal's
buffer out for it costs one ``pwrite`` per dispatch (5-10 us on ext4, the GIL held). Instead the
count goes into a shared mapping of ``delivery-counts.shadow`` in the store's directory: page-cache
memory, which a killed process leaves behind and only a reboot loses. The count's journal record
(UPDATE_DELIVERY_COUNT, appended at the same time) reaches the disk with the group commit.

Layout, little endian. A 64-byte header: magic, version, life (random per load), epoch, the boot
id of the machine (16 bytes), CRC32C of those. Then 32-byte entries, written in order from the
front: queue id (u64), message id (u64), delivery count (u32), epoch (u32), life (u32), CRC32C of
the first 28 bytes.

The rules:

* an entry counts only if its CRC holds and its life and epoch are the header's, and the header's
  boot id is this boot's: after a reboot the file may hold any mix of old pages, so it is ignored
  as a whole (its promise never covered a power cut). An entry cut short by a kill fails its CRC;
  its dispatch had not returned. Entries are read up to the first that does not count.
* when the entries are used up, the journal is written out (every count in them now has its record
  with the operating system) and the epoch goes up, which voids them all; writing restarts at the
  front. A dispatch that comes while another thread does this waits for it and writes its entry
  into the new epoch: returning after a write-out of its own would leave its reference's earlier
  entry the latest of the old epoch, which a kill before the new header keeps and load prefers.
* the same when a reference is added with the ids of one that has an entry in this epoch (a
  message id used again): the earlier reference's counts must not pass to the new one.
* a count written otherwise (a rollback's, a batch's) for a reference with an entry in this epoch is
  an entry too: the shadow is preferred to the journal, so it must never hold an older count.
* a count lowered by a close (not a failed delivery) is an entry too; the latest entry of a
  reference is its count.
* at load, a count that differs from the journal's is appended to the journal as count records
  and synced (MessageStore.load); then the shadow starts a new life, or is voided when the store is
  not in strict mode.

The record writers (RecordWriter, compiled and twin) write the entries: the compiled one straight into
the mapping, no Python object per dispatch. This module owns the file, the header and the epochs.
Not a shared-memory protocol: one process (the store's, under the journals' directory locks) uses
the file at a time.
"""
from __future__ import annotations

import logging
import mmap
import os
import random
import struct
import uuid

from ..limits import SHADOW_ENTRIES_DEFAULT
from .._impl import crc32c
from ..errors import FileChangedError, IncompatibleFormatError
from ..record_format import (SHADOW_ENTRY, SHADOW_ENTRY_BYTES, SHADOW_HEADER, SHADOW_HEADER_BYTES, SHADOW_MAGIC,
                             SHADOW_VERSION)
from ..storage import durability

log = logging.getLogger(__name__)

FILE_NAME = "delivery-counts.shadow"
MAGIC = SHADOW_MAGIC
VERSION = SHADOW_VERSION
HEADER_BYTES = SHADOW_HEADER_BYTES
ENTRY_BYTES = SHADOW_ENTRY_BYTES
_HEADER = SHADOW_HEADER
_HEADER_CRC = struct.Struct("<I")
_ENTRY = SHADOW_ENTRY
_ENTRY_CRC = struct.Struct("<I")
_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def boot_id() -> bytes | None:
    """This boot's id (Linux), or None where the system has none: then there is no shadow."""
    try:
        with open(_BOOT_ID_PATH, encoding="ascii") as source:
            return uuid.UUID(source.read().strip()).bytes
    except (OSError, ValueError):
        return None


def read_counts(path: str, this_boot: bytes | None = None) -> dict[tuple[int, int], int]:
    """(queue id, message id) -> the latest count the shadow at `path` holds for the reference (entries
    are written in order: a dispatch raises the count, a close lowers it); empty when there is no file,
    no valid header, or another boot's file."""
    this_boot = boot_id() if this_boot is None else this_boot
    try:
        with open(path, "rb") as source:
            data = source.read()
    except FileNotFoundError:
        return {}
    if len(data) < HEADER_BYTES:
        return {}
    magic, version, life, epoch, file_boot = _HEADER.unpack_from(data, 0)
    if magic != MAGIC or _HEADER_CRC.unpack_from(data, _HEADER.size)[0] != crc32c(data[:_HEADER.size]):
        return {}                 # voided, never used, or its header was being rewritten when it stopped
    if version != VERSION:
        raise IncompatibleFormatError(f"delivery-count shadow version {version}; this build reads {VERSION}",
                                 path=path, offset=8, field="version", hint="remove the file: it only "
                                 "holds counts a killed process left behind")
    if file_boot != this_boot:
        log.info("%s is from an earlier boot: ignored (its counts never had to survive one)", path)
        return {}
    counts: dict[tuple[int, int], int] = {}
    for offset in range(HEADER_BYTES, len(data) - ENTRY_BYTES + 1, ENTRY_BYTES):
        queue_id, message_id, value, entry_epoch, entry_life = _ENTRY.unpack_from(data, offset)
        if (entry_life != life or entry_epoch != epoch
                or _ENTRY_CRC.unpack_from(data, offset + _ENTRY.size)[0] != crc32c(data[offset:offset + _ENTRY.size])):
            break
        counts[(queue_id, message_id)] = value
    return counts


class DeliveryShadow:
    """The shadow of one store, open for writing (a new life). Its writer appends the entries."""

    def __init__(self, path: str, write_out, *, entries: int = SHADOW_ENTRIES_DEFAULT, this_boot: bytes,
                 life: int | None = None) -> None:
        """write_out(): hands everything appended to the journal to the operating system."""
        assert entries >= 1 and len(this_boot) == 16
        self.path = path
        self.capacity = entries
        self.life = random.getrandbits(32) if life is None else life
        self.epoch = 0
        self.next = 0                                   # the next entry to write
        self.touched: set = set()                       # keys with an entry in this epoch (the twin's)
        self._write_out = write_out
        self._boot = this_boot
        self.size = HEADER_BYTES + entries * ENTRY_BYTES
        if not os.path.exists(path) or os.path.getsize(path) != self.size:
            # real zeros: a store into a mapped hole would need a block, and a full disk would SIGBUS
            durability.create_zero_filled(path, self.size, b"")
        # kept open: Python's own writes go through it (pwrite), never through the mapping, whose pages
        # past the end of a file another process cut would kill the interpreter with SIGBUS; only the
        # compiled writer stores into the mapping, under its SIGBUS guard
        self._fd = os.open(path, os.O_RDWR)
        self.mapping = mmap.mmap(self._fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._write_header()

    def cut_error(self, offset: int | None = None) -> FileChangedError:
        """What a write into the shadow raises once another process has cut the file short."""
        return FileChangedError("the delivery-count shadow was cut short by another process", path=self.path,
                                offset=offset, hint="the counts are in the journal: close the store (or the "
                                "broker) and open it again, which makes a new shadow")

    def _write(self, offset: int, data: bytes) -> None:
        """`data` at `offset` of the file (the page cache the mapping shares); FileChangedError when the
        file is shorter than the shadow, instead of a write that would extend a file another process cut."""
        if os.fstat(self._fd).st_size < self.size:
            raise self.cut_error(offset)
        os.pwrite(self._fd, data, offset)

    def _write_header(self) -> None:
        head = _HEADER.pack(MAGIC, VERSION, self.life, self.epoch, self._boot)
        self._write(0, (head + _HEADER_CRC.pack(crc32c(head))).ljust(HEADER_BYTES, b"\0"))

    def roll(self) -> None:
        """Write the journal out, then void every entry (a new epoch); writing restarts at the front."""
        self._write_out()
        self.epoch = (self.epoch + 1) & 0xFFFFFFFF
        self.next = 0
        self.touched.clear()
        self._write_header()

    def record(self, queue_id: int, message_id: int, count: int) -> None:
        """The twin writer's entry of a dispatch: in the page cache when this returns (the caller
        holds the GIL or a lock: one writer at a time)."""
        if self.next == self.capacity:
            self.roll()
        entry = _ENTRY.pack(queue_id, message_id, count, self.epoch, self.life)
        self._write(HEADER_BYTES + self.next * ENTRY_BYTES, entry + _ENTRY_CRC.pack(crc32c(entry)))
        self.next += 1
        self.touched.add((queue_id, message_id))

    def close(self, *, void: bool) -> None:
        """Unmap; with void the header is wiped (the journal holds every count durably)."""
        if self.mapping.closed:
            return
        try:
            if void:
                os.pwrite(self._fd, bytes(HEADER_BYTES), 0)     # harmless on a file another process cut
        finally:
            self.mapping.close()
            os.close(self._fd)


def void(path: str) -> None:
    """Wipe the header of a shadow that is not going to be used (its counts are in the journal)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        os.pwrite(fd, bytes(HEADER_BYTES), 0)
    finally:
        os.close(fd)
