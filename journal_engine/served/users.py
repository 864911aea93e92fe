"""The served broker's users file (``serve-stomp --users FILE``) and the ``users add`` tool.

One user per line, five fields separated by ``:``::

    LOGIN:scrypt:N,r,p:SALT:HASH

``scrypt`` names the derivation (hashlib.scrypt), ``N,r,p`` its cost parameters (decimal), SALT and
HASH are hexadecimal (HASH is SCRYPT_HASH_BYTES long). The parameters are kept in each line so that a
later version may raise them: old lines still verify with their own. Empty lines and lines starting
with ``#`` are ignored. A login is printable ASCII without ``:`` or white space.

A password is checked by deriving its hash with the line's salt and parameters and comparing the
two hashes with hmac.compare_digest (constant time). A login that is not in the file costs the same
derivation (with a fixed salt), so the time of a refusal does not say which part was wrong.

The file is written by :func:`add_user` atomically (a temporary file in the same directory, mode
0600, fsync, rename, fsync of the directory).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

from ..errors import ConfigError
from ..storage import durability

__all__ = ["Users", "add_user", "derive", "SCRYPT_N", "SCRYPT_R", "SCRYPT_P"]

# scrypt's cost for new lines: N=2**14, r=8, p=1 takes about 16 MB and 50 ms on one core
SCRYPT_N = 2 ** 14
SCRYPT_R = 8
SCRYPT_P = 1
SCRYPT_SALT_BYTES = 16
SCRYPT_HASH_BYTES = 32
_SCRYPT_MAXMEM_BYTES = 64 * 1024 * 1024

_LOGIN = re.compile(r"[!-9;-~]{1,256}")     # printable ASCII, no ':' and no space
_UNKNOWN_SALT = b"journal-engine:no-such-user"


def derive(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=_SCRYPT_MAXMEM_BYTES,
                          dklen=SCRYPT_HASH_BYTES)


def _line_of(login: str, password: str) -> str:
    salt = secrets.token_bytes(SCRYPT_SALT_BYTES)
    hashed = derive(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    return f"{login}:scrypt:{SCRYPT_N},{SCRYPT_R},{SCRYPT_P}:{salt.hex()}:{hashed.hex()}"


def _check_login(login: str) -> None:
    if not _LOGIN.fullmatch(login):
        raise ConfigError("login", login, "a login is 1 to 256 printable ASCII characters without ':' or spaces")


class Users:
    """The users of a users file, read once (at the server's start)."""

    def __init__(self, entries: dict[str, tuple[bytes, int, int, int, bytes]]) -> None:
        self._entries = entries

    @classmethod
    def read(cls, path: str | os.PathLike) -> "Users":
        """The users of ``path``; ConfigError naming the file (and the line) when it cannot be read or
        a line is not of the format."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError("--users", os.fspath(path), f"cannot read the users file: "
                              f"{getattr(error, 'strerror', None) or error}",
                              hint="create it with `journal-engine users add FILE LOGIN`") from None
        entries = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            entry = _parse(line)
            if entry is None:
                raise ConfigError("--users", os.fspath(path), "not a users line (LOGIN:scrypt:N,r,p:SALT:HASH)",
                                  line=number, hint="docs/integrations.md describes the format")
            entries[entry[0]] = entry[1]
        return cls(entries)

    def __contains__(self, login: str) -> bool:
        return login in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def check(self, login: str | None, passcode: str | None) -> bool:
        """Whether ``passcode`` is ``login``'s password; a missing or unknown login costs one
        derivation too."""
        entry = self._entries.get(login or "")
        if entry is None:
            derive(passcode or "", _UNKNOWN_SALT, SCRYPT_N, SCRYPT_R, SCRYPT_P)
            return False
        salt, n, r, p, hashed = entry
        return hmac.compare_digest(derive(passcode or "", salt, n, r, p), hashed) and passcode is not None


def _parse(line: str):
    fields = line.rstrip("\r\n").split(":")
    if len(fields) != 5 or fields[1] != "scrypt" or not _LOGIN.fullmatch(fields[0]):
        return None
    try:
        n, r, p = (int(value) for value in fields[2].split(","))
        salt, hashed = bytes.fromhex(fields[3]), bytes.fromhex(fields[4])
    except ValueError:
        return None
    if n < 2 or n & (n - 1) or r < 1 or p < 1 or not salt or len(hashed) != SCRYPT_HASH_BYTES:
        return None
    return fields[0], (salt, n, r, p, hashed)


def add_user(path: str | os.PathLike, login: str, password: str, *, replace: bool = False) -> None:
    """Add ``login`` with ``password`` to the users file ``path`` (created when missing), written
    atomically with mode 0600. ConfigError when the login is there already and not ``replace``."""
    _check_login(login)
    path = Path(path)
    lines: list[str] = []
    if path.exists():
        Users.read(path)                        # refuse to rewrite a file that is not a users file
        lines = path.read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if line.split(":", 1)[0] != login]
    if len(kept) != len(lines) and not replace:
        raise ConfigError("login", login, f"is already in {path}", hint="--replace sets a new password")
    kept.append(_line_of(login, password))
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # created 0600 from the start: no moment when another user could read the hashes
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("\n".join(kept) + "\n")
        durability.fdatasync_path(os.fspath(temporary))
        durability.rename_durably(os.fspath(temporary), os.fspath(path), os.fspath(path.parent))
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
