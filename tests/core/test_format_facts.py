"""The frame header's layout is stated once (record_format.FRAME_HEADER and FrameField); the compiled
modules check the constants compiled into them against record_format when they are imported, with an
``if`` that ``python -O`` keeps (an ``assert`` would vanish), and the twins take their layouts from it."""
from __future__ import annotations

import subprocess
import sys
from fnmatch import fnmatchcase

import pytest

from journal_engine import record_format
from journal_engine._impl import encode_group
from journal_engine._twin import codec as twin_codec, record_writer as twin_record_writer
from journal_engine.storage.journal import format as journal_format


def test_a_module_built_from_another_record_format_refuses_to_import_even_under_python_dash_o():
    child = subprocess.run(
        [sys.executable, "-O", "-c",
         "from journal_engine import record_format as f\n"
         "f.check_compiled('journal_engine._example', {'frame header fields': ([0, 4, 9], [0, 4, 8])})"],
        capture_output=True, text=True, timeout=60)
    assert child.returncode == 1
    assert "ImportError: journal_engine._example was built from another record format" in child.stderr
    assert "frame header fields: compiled [0, 4, 9], record_format [0, 4, 8]" in child.stderr


def test_agreeing_facts_pass():
    record_format.check_compiled("journal_engine._example", {"sizes": ((32, 8), (32, 8))})


def test_the_frame_header_fields_sit_where_frame_field_says():
    group = encode_group(0xA1B2C3D4, [(record_format.RecordKind.UPDATE, 34, 0x1122334455667788, b"body!")])
    frame = group[group.index(b"body!") - record_format.FRAME_HEADER.size:]      # the member frame
    fields = record_format.FRAME_HEADER.unpack_from(frame)
    offsets = dict(zip(record_format.FrameField, fields))
    assert offsets[record_format.FrameField.BODY_LENGTH] == 5
    assert offsets[record_format.FrameField.KIND] == record_format.RecordKind.UPDATE
    assert offsets[record_format.FrameField.RECORD_TYPE] == 34
    assert offsets[record_format.FrameField.FLAGS] == record_format.GROUP_MEMBER
    assert offsets[record_format.FrameField.STAMP] == 0xA1B2C3D4
    assert offsets[record_format.FrameField.RECORD_ID] == 0x1122334455667788
    assert offsets[record_format.FrameField.TX_ID] == 0
    assert frame[record_format.FrameField.KIND] == record_format.RecordKind.UPDATE
    assert int.from_bytes(frame[record_format.FrameField.STAMP:record_format.FrameField.STAMP + 4], "little") == 0xA1B2C3D4


@pytest.mark.parametrize("name, layout", [("_COUNT", "DELIVERY_COUNT_BODY"), ("_TIME", "SCHEDULED_TIME_BODY"),
                                          ("_QUEUE_ID", "QUEUE_ID_BODY")])
def test_the_twin_writer_takes_its_body_layouts_from_record_format(name, layout):
    assert getattr(twin_record_writer, name) is getattr(record_format, layout)


def test_the_twin_codec_has_no_frame_layout_of_its_own():
    assert not any(isinstance(value, type(record_format.FRAME_HEADER)) and value.size == 32
                   for value in vars(twin_codec).values() if value is not record_format.FRAME_HEADER)


def test_the_glob_of_a_journals_files_matches_its_data_free_and_compaction_files_only():
    for name in (journal_format.data_name(1), journal_format.free_name(2), journal_format.compact_name(3)):
        assert fnmatchcase(name, journal_format.FILES_GLOB), name
    for name in (journal_format.LOCK_FILE, journal_format.CHECKPOINT_FILE, journal_format.CONTROL_FILE,
                 journal_format.data_name(1) + journal_format.TMP_SUFFIX):
        assert not fnmatchcase(name, journal_format.FILES_GLOB), name
