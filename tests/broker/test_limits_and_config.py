"""Every Journal option and every limit of journal_engine/limits.py, at its edge and one past it.

A bad option is a ConfigError (also a ValueError) that names the field and the
value, raised before anything is written to the directory.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from journal_engine import (
    AddressSettings,
    AddressSettingsRepository,
    Broker,
    ConfigError,
    Journal,
    JournalError,
    ManualClock,
    RecordTooLargeError,
    SelectorError,
    limits,
)
from journal_engine._impl import encode_frame
from journal_engine.broker.selector import Selector
from journal_engine.limits import (
    ADDRESS_SETTINGS_CACHE_ENTRIES_MAX,
    BUFFER_SIZE_MIN_BYTES,
    CHECKPOINTS_MAPPED_MAX,
    BUFFER_TIMEOUT_US_MAX,
    COMPACT_PERCENTAGE_MAX,
    COMPACT_UPDATE_FACTOR,
    DATA_START_BYTES,
    FILE_HEADER_SIZE_BYTES,
    FILE_SIZE_MAX_BYTES,
    FILE_SIZE_MIN_BYTES,
    FRAME_ALIGNMENT_BYTES,
    FRAME_HEADER_SIZE_BYTES,
    LMDB_BODY_BYTES_MAX,
    MIN_FILES_MIN,
    NAME_LENGTH_MAX,
    RECORD_ID_MAX,
    RECORD_TYPE_MAX,
    REDELIVERY_DELAYS_LENGTH_MAX,
    SECTOR_SIZE_BYTES,
    SELECTOR_LENGTH_MAX,
    TX_ID_MAX,
    max_body_bytes,
)
from journal_engine.storage.lmdb.store import LmdbRecordStore
from locations import ROOT

SMALL = FILE_SIZE_MIN_BYTES


# ----- options out of range --------------------------------------------------------------------------

BAD_OPTIONS = [
    ("file_size", FILE_SIZE_MIN_BYTES - SECTOR_SIZE_BYTES),
    ("file_size", FILE_SIZE_MIN_BYTES - 1),
    ("file_size", FILE_SIZE_MAX_BYTES + SECTOR_SIZE_BYTES),
    ("file_size", FILE_SIZE_MAX_BYTES + 1),
    ("file_size", FILE_SIZE_MIN_BYTES + 1),          # not a whole number of sectors
    ("file_size", FILE_SIZE_MIN_BYTES + 512),
    ("file_size", 0),
    ("file_size", -SMALL),
    ("file_size", float(SMALL)),
    ("file_size", str(SMALL)),
    ("file_size", None),
    ("min_files", MIN_FILES_MIN - 1),
    ("min_files", 0),
    ("min_files", -3),
    ("min_files", 2.0),
    ("sync", "sometimes"),
    ("sync", "ALWAYS"),
    ("sync", ""),
    ("sync", None),
    ("sync", True),
    ("buffer_timeout_us", BUFFER_TIMEOUT_US_MAX + 1),
    ("buffer_timeout_us", -1),
    ("buffer_timeout_us", 0.5),
    ("buffer_size", BUFFER_SIZE_MIN_BYTES - 1),
    ("buffer_size", 0),
    ("buffer_size", -1),
    ("buffer_size", "big"),
    ("compact_min_files", -1),
    ("compact_min_files", 1.5),
    ("compact_percentage", COMPACT_PERCENTAGE_MAX + 1),
    ("compact_percentage", -1),
    ("compact_percentage", 30.0),
]


@pytest.mark.parametrize("field,value", BAD_OPTIONS, ids=[f"{f}={v!r}" for f, v in BAD_OPTIONS])
def test_option_out_of_range_raises_config_error_naming_the_field(tmp_path, field, value):
    directory = tmp_path / "journal"
    with pytest.raises(ConfigError) as info:
        Journal(directory, **{field: value})
    error = info.value
    assert isinstance(error, ValueError) and isinstance(error, JournalError)
    assert error.field == field
    assert error.value == value or (error.value is value)
    assert field in str(error) and repr(value) in str(error)
    # refused before touching the disk: nothing was created, not even the directory or its lock
    assert not directory.exists()


GOOD_OPTIONS = [
    ("file_size", FILE_SIZE_MIN_BYTES),
    ("file_size", FILE_SIZE_MAX_BYTES),
    ("min_files", MIN_FILES_MIN),
    ("min_files", 50),
    ("sync", "always"),
    ("sync", "group"),
    ("sync", "none"),
    ("buffer_timeout_us", 0),
    ("buffer_timeout_us", BUFFER_TIMEOUT_US_MAX),
    ("buffer_size", BUFFER_SIZE_MIN_BYTES),
    ("compact_min_files", 0),
    ("compact_percentage", 0),
    ("compact_percentage", COMPACT_PERCENTAGE_MAX),
]


@pytest.mark.parametrize("field,value", GOOD_OPTIONS, ids=[f"{f}={v!r}" for f, v in GOOD_OPTIONS])
def test_option_at_its_limit_is_accepted(journal_dir, field, value):
    options = {"file_size": SMALL, field: value}
    journal = Journal(journal_dir, **options)
    try:
        if field == "file_size" and value == FILE_SIZE_MAX_BYTES:
            return   # accepting the option is the limit; pre-allocating 2 GiB files is not this test's job
        journal.load()
        journal.add(1, 1, b"x")
        journal.sync()
    finally:
        journal.close()
    with Journal(journal_dir, **options) as again:
        assert sorted(again.load().records) == [1]


# ----- relations between the limits -----------------------------------------------------------------------

def test_limits_relate_as_the_format_needs():
    assert FILE_HEADER_SIZE_BYTES % FRAME_ALIGNMENT_BYTES == 0
    assert FRAME_HEADER_SIZE_BYTES % FRAME_ALIGNMENT_BYTES == 0
    assert SECTOR_SIZE_BYTES % FRAME_ALIGNMENT_BYTES == 0
    assert FILE_SIZE_MIN_BYTES % SECTOR_SIZE_BYTES == 0 and FILE_SIZE_MAX_BYTES % SECTOR_SIZE_BYTES == 0
    assert FILE_SIZE_MIN_BYTES <= limits.FILE_SIZE_DEFAULT_BYTES <= FILE_SIZE_MAX_BYTES
    assert FILE_SIZE_MAX_BYTES <= 2 ** 32   # body lengths are u32
    assert RECORD_ID_MAX == TX_ID_MAX == 2 ** 64 - 1
    assert RECORD_TYPE_MAX == 255
    assert BUFFER_SIZE_MIN_BYTES >= SECTOR_SIZE_BYTES
    for size in (FILE_SIZE_MIN_BYTES, limits.FILE_SIZE_DEFAULT_BYTES, FILE_SIZE_MAX_BYTES):
        biggest = max_body_bytes(size)
        assert DATA_START_BYTES + FRAME_HEADER_SIZE_BYTES + biggest == size
        assert biggest % FRAME_ALIGNMENT_BYTES == 0   # the largest frame has no padding


def test_a_broken_relation_between_the_limits_refuses_the_import_even_under_python_dash_o():
    source = Path(limits.__file__).read_text(encoding="utf-8")
    broken = source.replace("FRAME_HEADER_SIZE_BYTES = 32", "FRAME_HEADER_SIZE_BYTES = 36", 1)
    assert broken != source
    code = compile(broken, limits.__file__, "exec", optimize=2)      # as python -O compiles it: no asserts
    with pytest.raises(ImportError, match="the frame header is 8-byte aligned"):
        exec(code, {"__name__": "journal_engine.limits"})


@pytest.mark.parametrize("body_len", list(range(3 * FRAME_ALIGNMENT_BYTES + 1)) + [4093, 4096])
def test_frames_are_aligned_to_eight_bytes(body_len):
    frame = encode_frame(11, 1, 1, 1, 0, bytes(body_len))
    assert len(frame) % FRAME_ALIGNMENT_BYTES == 0
    assert FRAME_HEADER_SIZE_BYTES + body_len <= len(frame) < FRAME_HEADER_SIZE_BYTES + body_len + 8


# ----- file size ---------------------------------------------------------------------------------------------

def test_smallest_file_size_makes_files_of_exactly_that_size(open_journal, journal_dir):
    journal, _ = open_journal(file_size=FILE_SIZE_MIN_BYTES, sync="none")
    for rid in range(300):
        journal.add(rid, 1, bytes(500))
    journal.close()
    sizes = {os.path.getsize(journal_dir / name) for name in os.listdir(journal_dir) if name.endswith(".jej")}
    assert sizes == {FILE_SIZE_MIN_BYTES}
    journal, loaded = open_journal(file_size=FILE_SIZE_MIN_BYTES)
    assert len(loaded.records) == 300


# ----- body size -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("file_size", [FILE_SIZE_MIN_BYTES, 2 * FILE_SIZE_MIN_BYTES + SECTOR_SIZE_BYTES])
def test_body_size_limit_is_max_body_bytes_of_the_file_size(open_journal, file_size):
    journal, _ = open_journal(file_size=file_size)
    biggest = max_body_bytes(file_size)
    journal.add(1, 1, bytes([1]) * biggest)
    with pytest.raises(RecordTooLargeError):
        journal.add(2, 1, bytes(biggest + 1))
    with pytest.raises(RecordTooLargeError):
        journal.update(1, 1, bytes(biggest + 1))
    journal.update(1, 2, bytes([2]) * biggest)
    journal.close()
    journal, loaded = open_journal(file_size=file_size)
    assert loaded.records[1].body == bytes([1]) * biggest
    assert loaded.records[1].updates == [(2, bytes([2]) * biggest)]


# ----- record ids, tx ids and record types ---------------------------------------------------------------

def test_record_id_and_tx_id_at_max_and_one_past(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(RECORD_ID_MAX, 1, b"max")
    journal.add_tx(TX_ID_MAX, 5, 1, b"tx max")
    journal.commit(TX_ID_MAX)
    with pytest.raises(OverflowError):
        journal.add(RECORD_ID_MAX + 1, 1, b"over")
    with pytest.raises(OverflowError):
        journal.add_tx(TX_ID_MAX + 1, 6, 1, b"over")
    journal.close()
    journal, loaded = open_journal(file_size=SMALL)
    assert sorted(loaded.records) == [5, RECORD_ID_MAX]


def test_record_type_at_max_and_one_past(open_journal):
    journal, _ = open_journal(file_size=SMALL)
    journal.add(1, RECORD_TYPE_MAX, b"x")
    with pytest.raises(ValueError):
        journal.add(2, RECORD_TYPE_MAX + 1, b"x")
    journal.close()
    journal, loaded = open_journal(file_size=SMALL)
    assert loaded.records[1].record_type == RECORD_TYPE_MAX and 2 not in loaded.records


# ----- min_files -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("min_files", [MIN_FILES_MIN, 5])
def test_min_files_are_kept_ready_after_load(open_journal, journal_dir, min_files):
    journal, _ = open_journal(file_size=SMALL, min_files=min_files)
    with journal._pool._activation_lock:      # the pool renames free files as it activates them
        sizes = {n: os.path.getsize(journal_dir / n) for n in os.listdir(journal_dir) if n.endswith((".jej", ".jef"))}
    assert len(sizes) >= min_files
    assert set(sizes.values()) == {SMALL}


# ----- compaction triggers ------------------------------------------------------------------------------------------

def _journal_with_two_files(open_journal, **options):
    """A journal whose writer is on its second data file, with one live record (id 1, type 7)."""
    journal, _ = open_journal(file_size=SMALL, sync="none", **options)
    journal.add(1, 7, b"k" * 8)
    journal.add(2, 1, bytes(max_body_bytes(SMALL) - 64))   # fills the first file: the next frame rolls
    journal.add(3, 1, b"on the second file")
    assert journal.stats()["data_files"] == 2
    return journal


def test_update_factor_triggers_compaction_only_when_exceeded(open_journal):
    journal = _journal_with_two_files(open_journal, compact_min_files=1, compact_percentage=0,
                                      replaceable_types={7: 4})
    adds = journal.stats()["add_count"]
    assert adds == 3
    for index in range(COMPACT_UPDATE_FACTOR * adds):
        journal.update(1, 7, b"k" * 8)
    assert journal.stats()["replaceable_updates"] == COMPACT_UPDATE_FACTOR * adds
    assert journal.needs_compaction() is False        # at the factor: not yet
    journal.update(1, 7, b"k" * 8)
    assert journal.needs_compaction() is True         # one past it
    journal.update(1, 8, b"not replaceable")
    assert journal.stats()["replaceable_updates"] == COMPACT_UPDATE_FACTOR * adds + 1


def _two_file_journal_on_disk(open_journal) -> tuple[int, int]:
    """Leave a closed journal of two data files on disk; returns (live bytes, data files) as loaded."""
    journal, _ = open_journal(file_size=SMALL, sync="none", compact_min_files=0)
    journal.add(1, 1, bytes(30_000))
    journal.add(2, 1, bytes(30_000))
    journal.add(3, 1, bytes(30_000))   # does not fit after the other two: the second file
    journal.delete(2)
    journal.close()
    journal, _ = open_journal(file_size=SMALL, compact_min_files=0)
    stats = journal.stats()
    journal.close()
    assert stats["data_files"] == 2
    return stats["live_bytes"], stats["data_files"]


def test_compact_percentage_triggers_only_below_the_threshold(open_journal):
    """Checked right after load, so no append (and no automatic compaction) moves the numbers."""
    live_bytes, data_files = _two_file_journal_on_disk(open_journal)
    edge = live_bytes * 100 // (data_files * SMALL)   # the largest percentage live data is not below
    for percentage, expected in ((edge, False), (edge + 1, True)):
        journal, _ = open_journal(file_size=SMALL, compact_min_files=1, compact_percentage=percentage)
        assert journal.stats()["live_bytes"] == live_bytes
        assert journal.needs_compaction() is expected, percentage
        assert journal.stats()["needs_compaction"] is expected
        journal.close()


def test_compact_min_files_must_be_exceeded(open_journal):
    _live_bytes, data_files = _two_file_journal_on_disk(open_journal)
    for min_files, expected in ((data_files, False), (data_files - 1, True)):
        journal, _ = open_journal(file_size=SMALL, compact_min_files=min_files,
                                  compact_percentage=COMPACT_PERCENTAGE_MAX)
        assert journal.needs_compaction() is expected, min_files
        journal.close()


def test_compact_min_files_zero_turns_automatic_compaction_off(open_journal):
    _two_file_journal_on_disk(open_journal)
    journal, _ = open_journal(file_size=SMALL, compact_min_files=0, compact_percentage=COMPACT_PERCENTAGE_MAX)
    assert journal.needs_compaction() is False
    journal.compact()   # a manual compaction still works
    assert journal.stats()["compactions"] == 1
    journal.close()
    journal, loaded = open_journal(file_size=SMALL)
    assert sorted(loaded.records) == [1, 3]


# ----- the broker's and the LMDB store's maxima ----------------------------------------------------------

def test_a_name_of_the_maximum_length_is_kept_and_one_longer_is_refused(tmp_path):
    name = "n" * NAME_LENGTH_MAX
    options = {"file_size": 4 * SMALL}          # a frame of the longest name fits in a file
    broker = Broker(tmp_path / "broker", clock=ManualClock(0), store_options=options)
    broker.create_queue(name, address=name)
    broker.send(name, b"to the longest name")
    for too_long in ({"name": name + "n"}, {"name": "q", "address": name + "n"}):
        with pytest.raises(ConfigError, match=f"longer than {NAME_LENGTH_MAX} characters"):
            broker.create_queue(**too_long)
    broker.close()
    broker = Broker(tmp_path / "broker", clock=ManualClock(0), store_options=options)
    assert broker.queue_names() == [name] and broker.queue(name).address == name
    assert broker.create_consumer(name).receive(0).body == b"to the longest name"
    broker.close()


def test_a_selector_of_the_maximum_length_filters_and_one_longer_is_refused():
    head = "colour = '"
    colour = "x" * (SELECTOR_LENGTH_MAX - len(head) - 1)
    at_max = head + colour + "'"
    assert len(at_max) == SELECTOR_LENGTH_MAX
    broker = Broker(clock=ManualClock(0))
    broker.create_queue("q", filter=at_max)
    broker.send("q", b"other", properties={"colour": "y"})
    broker.send("q", b"match", properties={"colour": colour})
    assert broker.create_consumer("q").receive(0).body == b"match"
    with pytest.raises(SelectorError, match=f"longer than {SELECTOR_LENGTH_MAX} characters") as info:
        Selector(at_max + " ")
    assert isinstance(info.value, ConfigError)
    broker.close()


def test_redelivery_delays_of_the_maximum_length_are_kept_and_one_more_is_refused():
    delays = list(range(REDELIVERY_DELAYS_LENGTH_MAX))
    settings = AddressSettings(redelivery_delays=delays)
    assert settings.redelivery_delays == tuple(delays)
    with pytest.raises(ConfigError, match=f"at most {REDELIVERY_DELAYS_LENGTH_MAX} entries") as info:
        AddressSettings(redelivery_delays=[*delays, 0])
    assert info.value.field == "redelivery_delays"


def test_an_lmdb_body_of_the_maximum_size_is_accepted_and_one_byte_more_is_refused(tmp_path):
    """Accepted into a transaction that is then rolled back: the check is the limit, and writing 4 GiB is
    not this test's job (bytes(n) is zeros the kernel maps lazily: neither body costs memory)."""
    store = LmdbRecordStore(tmp_path / "lmdb")
    store.load()
    store.add_tx(1, 1, 1, bytes(LMDB_BODY_BYTES_MAX))
    too_large = bytes(LMDB_BODY_BYTES_MAX + 1)
    with pytest.raises(RecordTooLargeError, match=str(LMDB_BODY_BYTES_MAX)):
        store.add(2, 1, too_large)
    with pytest.raises(RecordTooLargeError, match=str(LMDB_BODY_BYTES_MAX)):
        store.add_tx(3, 3, 1, too_large)
    del too_large
    store.rollback(1)
    store.close()
    store = LmdbRecordStore(tmp_path / "lmdb")
    assert store.load().records == {}
    store.close()


def test_the_address_settings_cache_holds_its_maximum_and_starts_over_one_past_it():
    """Past ADDRESS_SETTINGS_CACHE_ENTRIES_MAX nothing is refused (addresses are unbounded): the cache
    starts over, so it never holds more than that many merged settings."""
    repository = AddressSettingsRepository()
    repository.add("a.#", AddressSettings(max_delivery_attempts=3))
    addresses = [f"a.{n}" for n in range(ADDRESS_SETTINGS_CACHE_ENTRIES_MAX + 1)]
    for address in addresses[:-1]:
        assert repository.get(address).max_delivery_attempts == 3
    assert all(repository.cached(address) is not None for address in addresses[:-1])
    repository.get(addresses[-1])
    assert repository.cached(addresses[-1]) is not None
    assert not any(repository.cached(address) is not None for address in addresses[:-1])


# ----- the compiled core's table of mapped checkpoints ----------------------------------------------------

def test_the_sigbus_guards_table_has_the_size_limits_gives_it():
    header = (ROOT / "pyx" / "journal_engine" / "bus_guard.h").read_text(encoding="utf-8")
    sizes = re.findall(r"^#define JE_PATCHED_MAX (\d+)$", header, re.MULTILINE)
    assert sizes == [str(CHECKPOINTS_MAPPED_MAX)]


MAP_CHECKPOINTS = """
import os, sys
from journal_engine._scan import CheckpointMapping
from journal_engine.limits import CHECKPOINTS_MAPPED_MAX
path = sys.argv[1]
with open(path, "wb") as handle:
    handle.write(bytes(4096))
fd = os.open(path, os.O_RDONLY)
held = [CheckpointMapping(fd, 4096, path, bytes(8)) for _ in range(CHECKPOINTS_MAPPED_MAX)]
try:
    CheckpointMapping(fd, 4096, path, bytes(8))
except OSError as refused:
    print(len(held), refused)
"""


def test_the_compiled_core_maps_the_maximum_of_checkpoints_and_refuses_one_more(tmp_path):
    """In a child process of its own, where no other checkpoint is mapped (the compiled module is imported
    by name: the twin maps no checkpoint, and a twin run has the compiled core built beside it)."""
    if importlib.util.find_spec("journal_engine._scan") is None:
        pytest.fail("the compiled core is not built")
    env = {key: value for key, value in os.environ.items() if key != "JOURNAL_ENGINE_IMPLEMENTATION"}
    done = subprocess.run([sys.executable, "-c", MAP_CHECKPOINTS, str(tmp_path / "checkpoint")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{CHECKPOINTS_MAPPED_MAX} ") and "CHECKPOINTS_MAPPED_MAX" in done.stdout
