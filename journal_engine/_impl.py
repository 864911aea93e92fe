"""The one switch between the compiled core and its Python twin.

JOURNAL_ENGINE_IMPLEMENTATION=python forces the twin (for parity tests and for
reading the logic); JOURNAL_ENGINE_REQUIRE_EXTENSION=1 turns a missing compiled
core into an ImportError instead of a fallback (CI runs this way).
"""
from __future__ import annotations

import importlib
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


#: the core, module by module: each compiled ``journal_engine._<module>`` (pyx/) and its Python twin
#: ``journal_engine._twin.<module>`` give the package these names, which the rest of it imports from here
CORE_EXPORTS: dict[str, tuple[str, ...]] = {
    "broker_objects": ("ACKED_IN_TX", "DELIVERING", "DONE", "READY", "SCHEDULED", "Message", "MessageData",
                       "ReadyQueue", "Reference", "delivery_of", "ready_references", "recovered_datas",
                       "split_by_level"),
    "codec": ("check_frame", "crc32c", "crc32c_software", "crc32c_uses_hardware", "encode_frame", "encode_group"),
    "core": ("JournalCore", "Segment"),
    "image": ("checkpointed_columns", "columns_image", "file_checksum", "image_is_sound", "image_size"),
    "livemap": ("LiveMap",),
    "message_columns": ("MessageColumns", "decode_message_columns"),
    "message_recovery": ("MessageRecovery", "QueueReferences", "decode_message_fields", "decode_messages_fields",
                         "recover_messages", "release_from_collector"),
    "record_writer": ("RecordWriter",),
    "replay": ("RecordInfo", "ReplayState"),
    "scan": ("GAP_REASONS", "GUARDS_MAPPED_READS", "Body", "CheckpointMapping", "FrameColumns", "MappedFile",
             "is_pinned", "scan_columns", "scan_frames"),
    "stomp_codec": ("FrameReader", "StompFrame", "header_value", "message_frame_bytes", "UNESCAPED_COMMANDS"),
    "store_body": ("ROUTING_NAMES",),
}


def _import_core(module_name: str) -> dict:
    """Every core module imported by ``module_name.format(module)``: {module: the imported module}."""
    return {module: importlib.import_module(module_name.format(module), __package__) for module in CORE_EXPORTS}


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
        _core_modules = _import_core("._{}")      # compiled
        IMPLEMENTATION = "cython"
    except ImportError as exc:
        if _require:
            raise ImportError(
                f"the compiled core of journal_engine is not built ({describe_missing_core(exc, __file__)}); "
                "install with `pip install -e .` (needs a C compiler and Cython)") from exc
        warnings.warn(f"journal_engine: compiled core unavailable ({describe_missing_core(exc, __file__)}); "
                      "using the Python twin", RuntimeWarning, stacklevel=2)
        IMPLEMENTATION = "python"
if IMPLEMENTATION == "python":
    _core_modules = _import_core("._twin.{}")

for _module, _names in CORE_EXPORTS.items():
    globals().update({name: getattr(_core_modules[_module], name) for name in _names})
del _module, _names, _core_modules

__all__ = ["IMPLEMENTATION", *(name for names in CORE_EXPORTS.values() for name in names)]
