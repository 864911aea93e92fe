"""Where the Spark source reads a journal's files: this machine's file systems, or a pyarrow.fs one.

A path without a scheme, or a ``file://`` URI, is a local directory, read by the journal package's own
readers (mapped files, a committed compaction read as finished, a file renamed meanwhile read again:
storage/journal/scan.py). Any other URI -- ``s3://`` (``s3a://``, ``s3n://``: Hadoop's names for it), ``gs://``,
``hdfs://`` -- is opened with the file system the Arrow stack already has (``pyarrow.fs.FileSystem.
from_uri``: credentials and endpoint as pyarrow takes them, from the environment or the URI's query) and
its journal files are read where they lie, each whole into memory, then decoded by the same columnar
decoder. A remote journal is an archive: a journal whose compaction was interrupted (a control file) is
refused there -- open it where it was written, which finishes it, and copy it again.
"""
from __future__ import annotations

import os
import posixpath
from typing import Callable, TypeVar
from urllib.parse import urlsplit, urlunsplit

from .._impl import scan_columns
from ..errors import ConfigError, CorruptRecordError, FileChangedError
from ..storage.journal.format import CONTROL_FILE, DATA_NAME, stamp_of
from ..storage.journal.scan import FileScan, read_while_live, scan_data_file
from ..storage.journal.segment_files import DataFile, data_file_of, list_directory, read_header, vanished
from ..limits import FILE_HEADER_SIZE_BYTES
from ..storage.directory_kind import stored_backend
from ..storage.lmdb.format import DATA_FILE as LMDB_DATA_FILE

T = TypeVar("T")
#: Hadoop's names of S3, which pyarrow calls s3
_S3_SCHEMES = {"s3a": "s3", "s3n": "s3"}


def local_path(path: str) -> str | None:
    """The local path of ``path`` (a plain path or a ``file://`` URI), or None for another file system."""
    scheme = urlsplit(path).scheme
    if "://" not in path or len(scheme) < 2:       # a plain path (a Windows drive letter is no scheme)
        return path
    if scheme == "file":
        import pyarrow.fs
        return pyarrow.fs.FileSystem.from_uri(path)[1]
    return None


class LocalFiles:
    """A journal directory on this machine's file systems: the journal package's readers."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def listing(self, unreadable: list | None = None) -> list[DataFile]:
        """The data files load() replays, in its order (``unreadable``: see list_directory)."""
        return list_directory(self.directory, as_if_compacted=True, unreadable=unreadable).data

    def scan(self, data: DataFile) -> FileScan:
        return FileScan(data, scan_data_file(data))

    def header(self, path: str) -> DataFile:
        return read_header(path)

    def again_if_changed(self, read: Callable[[], T]) -> T:
        """``read()`` again when a file it listed vanished meanwhile (a live writer compacting)."""
        return read_while_live(self.directory, read)


class ArrowFiles:
    """A journal directory behind a pyarrow.fs URI (the module docstring says what is read how)."""

    def __init__(self, uri: str) -> None:
        import pyarrow.fs
        self.uri = uri
        parts = urlsplit(uri)
        scheme = _S3_SCHEMES.get(parts.scheme, parts.scheme)
        self.filesystem, self.root = pyarrow.fs.FileSystem.from_uri(urlunsplit(parts._replace(scheme=scheme)))
        self.root = self.root.rstrip("/")
        #: the URI as rows show it: no credentials (user info), no query (endpoint and options)
        self.location = urlunsplit((parts.scheme, parts.hostname or "", parts.path.rstrip("/"), "", ""))

    def _uri_of(self, name: str) -> str:
        return f"{self.location}/{name}"

    def child(self, name: str) -> str:
        """The full URI (credentials and query kept) of an entry of this directory."""
        parts = urlsplit(self.uri)
        return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/{name}"))

    def _inner(self, path: str) -> str:
        return posixpath.join(self.root, posixpath.basename(path))

    def names(self) -> dict[str, object]:
        """The entries of the directory by name (pyarrow FileInfo)."""
        import pyarrow.fs
        try:
            infos = self.filesystem.get_file_info(pyarrow.fs.FileSelector(self.root))
        except (OSError, ValueError) as exc:
            raise ConfigError("path", self.location, f"cannot list it: {exc}",
                              hint="check the URI and the credentials (docs/spark.md, Journals in object "
                                   "storage)") from None
        return {posixpath.basename(info.path): info for info in infos}

    def listing(self, unreadable: list | None = None) -> list[DataFile]:
        names = self.names()
        if CONTROL_FILE in names:
            raise CorruptRecordError("an interrupted compaction (its control file) in an archived journal",
                                     path=self._uri_of(CONTROL_FILE), offset=0, field="control",
                                     hint="open the journal where it was written (load() finishes the "
                                          "compaction), then copy it again")
        found = []
        for name in sorted(name for name in names if DATA_NAME.match(name)):
            try:
                found.append(self.header(self._uri_of(name)))
            except CorruptRecordError as damaged:
                if unreadable is None:
                    raise
                unreadable.append(damaged)
        return sorted(found, key=lambda data: data.header.sequence)

    def _read(self, path: str, size: int | None = None):
        try:
            with self.filesystem.open_input_file(self._inner(path)) as handle:
                return handle.read(size) if size is not None else handle.read_buffer()
        except FileNotFoundError as exc:
            raise vanished(path) from exc

    def header(self, path: str) -> DataFile:
        info = self.filesystem.get_file_info(self._inner(path))
        return data_file_of(path, self._read(path, FILE_HEADER_SIZE_BYTES), info.size)

    def scan(self, data: DataFile) -> FileScan:
        contents = self._read(data.path)
        if contents.size < data.size:
            raise FileChangedError(f"the object is {contents.size} bytes long, {data.size} when it was listed",
                                   path=data.path, offset=contents.size, hint="it was replaced while it was read; "
                                                                              "read again")
        return FileScan(data, scan_columns(memoryview(contents), stamp_of(data.header.file_id),
                                           data.header.data_start))

    def again_if_changed(self, read: Callable[[], T]) -> T:
        return read()       # an archive does not change while it is read


def files_of(journal: str) -> LocalFiles | ArrowFiles:
    """The reader of a journal directory the source found (a local path or a URI)."""
    return ArrowFiles(journal) if "://" in journal else LocalFiles(journal)


def find_stores(path: str) -> list[tuple[str, str]]:
    """The record stores at ``path`` as (directory or URI, backend: "journal" or "lmdb"): itself when it
    holds one, else those of its immediate subdirectories that do (a broker's or message store's
    ``messages`` and ``bindings``)."""
    local = local_path(path)
    if local is None:
        return _find_remote_stores(path)
    local = os.path.abspath(local)
    if not os.path.isdir(local):
        raise ConfigError("path", path, "not a directory", hint="give a journal directory, an LMDB store, or a "
                                                                "broker's or message store's directory")
    backend = stored_backend(local)
    if backend is not None:
        return [(local, backend)]
    found = []
    for name in sorted(os.listdir(local)):
        directory = os.path.join(local, name)
        backend = stored_backend(directory) if os.path.isdir(directory) else None
        if backend is not None:
            found.append((directory, backend))
    if not found:
        raise ConfigError("path", path, "holds no record store (journal-*.jej files, an LMDB data.mdb), nor do "
                                        "its subdirectories",
                          hint="give the directory Broker() or MessageStore() wrote, or one of its journals")
    return found


def _find_remote_stores(uri: str) -> list[tuple[str, str]]:
    import pyarrow.fs
    top = ArrowFiles(uri)
    names = top.names()
    if LMDB_DATA_FILE in names:
        raise ConfigError("path", top.location, "an LMDB store is read from a local path only",
                          hint="copy it to a file system the executors mount")
    if any(DATA_NAME.match(name) for name in names):
        return [(top.uri, "journal")]
    found = [(top.child(name), "journal") for name, info in sorted(names.items())
             if info.type == pyarrow.fs.FileType.Directory
             and any(DATA_NAME.match(inner) for inner in ArrowFiles(top.child(name)).names())]
    if not found:
        raise ConfigError("path", top.location, "holds no journal files (journal-*.jej), nor do its subdirectories",
                          hint="give the URI of a journal, or of a broker's or message store's directory")
    return found
