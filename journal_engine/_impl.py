"""The one switch between the compiled core and its Python twin.

JOURNAL_ENGINE_IMPLEMENTATION=python forces the twin (for parity tests and for
reading the logic); JOURNAL_ENGINE_REQUIRE_EXTENSION=1 turns a missing compiled
core into an ImportError instead of a fallback (CI runs this way).
"""
from __future__ import annotations

import os
import warnings

FORCE_ENV = "JOURNAL_ENGINE_IMPLEMENTATION"
REQUIRE_ENV = "JOURNAL_ENGINE_REQUIRE_EXTENSION"



def describe_missing_core(error: ImportError, impl_file: str) -> str:
    """Why the compiled core did not import, in the user's terms. Python words a module missing from a
    package that is still importing as "most likely due to a circular import"; here the usual cause is
    a source checkout without built extensions shadowing the installed package (Python run from inside
    the checkout after `pip install .`), so say that instead."""
    package_dir = os.path.dirname(os.path.abspath(impl_file))
    if any(name.startswith("_core.") and name.endswith((".so", ".pyd")) for name in os.listdir(package_dir)):
        return str(error)
    return (f"{package_dir} holds no built extension: this is the source tree, and it shadows any installed "
            "journal_engine because Python looks in the current directory first; run from outside the "
            "checkout to use the installed package, or build here with `pip install -e .`")


_forced = os.environ.get(FORCE_ENV, "").strip().lower()
if _forced not in ("", "cython", "python"):
    raise ImportError(f"{FORCE_ENV}={_forced!r}: use 'cython' or 'python'")
_require = os.environ.get(REQUIRE_ENV, "") not in ("", "0") or _forced == "cython"

if _forced == "python":
    if _require and os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
        raise ImportError(f"{FORCE_ENV}=python contradicts {REQUIRE_ENV}=1")
    IMPLEMENTATION = "python"
else:
    try:
        from . import _broker_objects, _codec, _core, _livemap, _message_columns, _record_writer, _replay, _stomp_codec  # noqa: F401  (compiled)
        IMPLEMENTATION = "cython"
    except ImportError as exc:
        if _require:
            raise ImportError(
                f"the compiled core of journal_engine is not built ({describe_missing_core(exc, __file__)}); "
                "install with `pip install -e .` (needs a C compiler and Cython)") from exc
        warnings.warn(f"journal_engine: compiled core unavailable ({describe_missing_core(exc, __file__)}); "
                      "using the Python twin", RuntimeWarning, stacklevel=2)
        IMPLEMENTATION = "python"

if IMPLEMENTATION == "cython":
    from ._broker_objects import (ACKED_IN_TX, DELIVERING, DONE, READY, SCHEDULED, Message, MessageData, ReadyQueue,
                                  Reference, delivery_of, ready_references, recovered_datas)
    from ._codec import check_frame, crc32c, crc32c_software, crc32c_uses_hardware, encode_frame, encode_group
    from ._core import JournalCore, Segment
    from ._livemap import LiveMap
    from ._message_columns import (ROUTING_NAMES, MessageColumns, MessageRecovery, QueueReferences, decode_message_columns,
                                   decode_message_fields, decode_messages_fields, recover_messages,
                                   release_from_collector)
    from ._replay import (GAP_REASONS, GUARDS_MAPPED_READS, Body, CheckpointMapping, FrameColumns, MappedFile,
                          RecordInfo, ReplayState, checkpointed_columns, columns_image, file_checksum, image_is_sound, image_size, is_pinned,
                          scan_columns, scan_frames)
    from ._record_writer import RecordWriter
    from ._stomp_codec import UNESCAPED_COMMANDS, FrameReader, StompFrame, header_value, message_frame_bytes
else:
    from ._twin.broker_objects import (ACKED_IN_TX, DELIVERING, DONE, READY, SCHEDULED, Message, MessageData,
                                       ReadyQueue, Reference, delivery_of, ready_references, recovered_datas)
    from ._twin.codec import check_frame, crc32c, crc32c_software, crc32c_uses_hardware, encode_frame, encode_group
    from ._twin.core import JournalCore, Segment
    from ._twin.livemap import LiveMap
    from ._twin.message_columns import (ROUTING_NAMES, MessageColumns, MessageRecovery, QueueReferences,
                                        decode_message_columns, decode_message_fields, decode_messages_fields,
                                        recover_messages, release_from_collector)
    from ._twin.record_writer import RecordWriter
    from ._twin.stomp_codec import UNESCAPED_COMMANDS, FrameReader, StompFrame, header_value, message_frame_bytes
    from ._twin.replay import (GAP_REASONS, GUARDS_MAPPED_READS, Body, CheckpointMapping, FrameColumns, MappedFile,
                               RecordInfo, ReplayState, checkpointed_columns, columns_image, file_checksum, image_is_sound,
                               image_size, is_pinned, scan_columns, scan_frames)

__all__ = ["IMPLEMENTATION", "JournalCore", "Segment", "LiveMap", "RecordInfo", "ReplayState", "scan_frames", "scan_columns", "FrameColumns",
           "crc32c", "crc32c_software", "crc32c_uses_hardware", "encode_frame", "encode_group", "check_frame", "RecordWriter",
           "MessageColumns", "decode_message_columns", "ROUTING_NAMES", "GAP_REASONS", "MessageRecovery",
           "QueueReferences", "recover_messages", "decode_message_fields", "decode_messages_fields",
           "release_from_collector", "GUARDS_MAPPED_READS", "Body", "MappedFile", "is_pinned",
           "CheckpointMapping", "checkpointed_columns", "columns_image", "file_checksum", "image_is_sound", "image_size",
           "MessageData", "Reference", "Message", "delivery_of", "recovered_datas", "ready_references", "ReadyQueue", "READY", "SCHEDULED", "DELIVERING", "DONE", "ACKED_IN_TX",
           "FrameReader", "StompFrame", "header_value", "message_frame_bytes", "UNESCAPED_COMMANDS"]
