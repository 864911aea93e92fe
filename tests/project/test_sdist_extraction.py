"""The sdist helper unpacks safely on every Python pyproject.toml claims, including those whose
``tarfile`` has no ``data_filter`` (before 3.10.12 and 3.11.4, e.g. Debian 12's 3.11.2)."""
from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from sdist_suites import extract_safely


def _archive(path: Path, hostile: tarfile.TarInfo | None) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        good = tarfile.TarInfo("pkg-1.0/module.py")
        body = b"VALUE = 1\n"
        good.size = len(body)
        archive.addfile(good, io.BytesIO(body))
        if hostile is not None:
            archive.addfile(hostile, io.BytesIO(b"x" * hostile.size))
    return path


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1
    return info


def _symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    return info


@pytest.fixture
def without_data_filter(monkeypatch):
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    original = tarfile.TarFile.extractall

    def extractall(self, path=".", members=None, *, numeric_owner=False, **kwargs):
        assert "filter" not in kwargs, "the fallback must not pass filter= to an old tarfile"
        return original(self, path, members, numeric_owner=numeric_owner)
    monkeypatch.setattr(tarfile.TarFile, "extractall", extractall)


def test_fallback_extracts_a_good_archive(tmp_path, without_data_filter):
    archive = _archive(tmp_path / "good.tar.gz", None)
    out = tmp_path / "out"
    out.mkdir()
    extract_safely(archive, out)
    assert (out / "pkg-1.0" / "module.py").read_text() == "VALUE = 1\n"


@pytest.mark.parametrize("hostile", [
    _file("../escaped.py"),
    _file("/tmp/absolute_escape.py"),
    _file("pkg-1.0/../../escaped.py"),
    _symlink("pkg-1.0/link", "/etc/passwd"),
    _symlink("pkg-1.0/link", "../../outside"),
], ids=["dotdot", "absolute", "nested-dotdot", "absolute-link", "link-outside"])
def test_fallback_refuses_a_hostile_member_and_writes_nothing(tmp_path, without_data_filter, hostile):
    archive = _archive(tmp_path / "hostile.tar.gz", hostile)
    out = tmp_path / "deep" / "out"
    out.mkdir(parents=True)
    with pytest.raises(tarfile.TarError, match="unsafe member"):
        extract_safely(archive, out)
    assert not any(out.iterdir()), "nothing is written when one member is refused"
    assert not (tmp_path / "deep" / "escaped.py").exists()


def test_a_hostile_member_is_refused_on_this_python_too(tmp_path):
    archive = _archive(tmp_path / "hostile.tar.gz", _file("../escaped.py"))
    with pytest.raises(tarfile.TarError):
        extract_safely(archive, tmp_path / "out")
