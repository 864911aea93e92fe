"""`journal-engine`: the command line (click + rich), one module per command group.

``inspection`` (print, stats, verify), ``transfer`` (export, import), ``maintenance`` (compact),
``dead_letters`` (dlq list, dlq redrive), ``mounted`` (demo, bench, crash-test, serve-stomp: the
products' own commands, mounted here). Every inspecting command reads through ``target`` and never
writes to what it inspects. An operating error ends in one line naming the path and what to do,
with the exit status of ``console`` (``--debug`` shows the traceback instead).
"""
from __future__ import annotations

import errno
import sys

import click

from .. import IMPLEMENTATION, __version__
from ..errors import (ConfigError, CorruptRecordError, JournalError, JournalIOError, JournalLockedError)
from .console import EXIT_DAMAGE, EXIT_IN_USE, EXIT_IO, EXIT_USAGE, end_quietly_on_closed_pipe, fail_line
from .target import NoJournalError
from .transfer import NotAnExportError

__all__ = ["main", "cli"]


def exit_status_of(error: BaseException) -> int:
    """The documented exit status of an operating error (console.py)."""
    if isinstance(error, JournalLockedError):
        return EXIT_IN_USE
    if isinstance(error, (NoJournalError, NotAnExportError, ConfigError)):
        return EXIT_USAGE
    if isinstance(error, CorruptRecordError):
        return EXIT_DAMAGE
    if isinstance(error, (JournalIOError, OSError)):
        return EXIT_IO
    return EXIT_DAMAGE


def _line_for_os_error(error: OSError) -> str:
    where = getattr(error, "filename", None)
    what = error.strerror or str(error)
    hint = ("run as a user who may read it (or fix its permissions)" if error.errno in (errno.EACCES, errno.EPERM)
            else "check the path and the disk")
    return f"{where}: {what} (hint: {hint})" if where else f"{what} (hint: {hint})"


#: the optional packages a command may need, and the extra that installs each (pyproject.toml)
OPTIONAL_PACKAGES = {"lmdb": "lmdb", "pyarrow": "export"}


def missing_package(error: ImportError) -> str | None:
    """The optional package whose absence ``error`` reports (through the ImportError a module raises in
    its turn, such as the LMDB store's), or None: then it is a broken install or a bug, shown in full."""
    seen: BaseException | None = error
    while seen is not None:
        name = getattr(seen, "name", None)
        if name is not None and name.split(".")[0] in OPTIONAL_PACKAGES:
            return name.split(".")[0]
        seen = seen.__cause__ or seen.__context__
    return None


class _Commands(click.Group):
    """The root group: turns operating errors into one line and an exit status."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:             # `journal-engine stats DIR | head`: a closed pipe is no damage
            return end_quietly_on_closed_pipe()
        except ImportError as error:
            package = missing_package(error)
            if package is None or ctx.params.get("debug"):
                raise
            fail_line(f"this command needs the {package} package, which is not installed (hint: in the journal_engine "
                      f"checkout or its unpacked sdist: pip install '.[{OPTIONAL_PACKAGES[package]}]')")
            return EXIT_USAGE
        except (JournalError, OSError) as error:
            if ctx.params.get("debug"):
                raise
            is_plain_os_error = isinstance(error, OSError) and not isinstance(error, JournalError)
            fail_line(_line_for_os_error(error) if is_plain_os_error else str(error))
            return exit_status_of(error)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="journal-engine",
                      message=f"%(prog)s %(version)s ({IMPLEMENTATION} core)")
@click.option("--debug", is_flag=True, help="show the Python traceback of an error instead of one line")
def cli(debug: bool) -> None:
    """journal_engine's operator tools: inspect, export, verify, compact journals and broker directories;
    list and redrive dead letters; run the demo, the benchmarks and the crash harness.

    Exit status: 0 ok, 1 damage found, 2 usage or no journal, 3 I/O error, 4 journal in use."""


def _mount() -> None:
    from . import dead_letters, inspection, maintenance, mounted, transfer
    for module in (inspection, transfer, maintenance, dead_letters, mounted):
        for command in module.COMMANDS:
            cli.add_command(command)


_mount()


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    try:
        result = cli.main(args=argv, prog_name="journal-engine", standalone_mode=False)
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.exceptions.ClickException as error:
        error.show()
        return EXIT_USAGE if isinstance(error, click.UsageError) else error.exit_code
    except click.exceptions.Abort:
        fail_line("aborted")
        return EXIT_DAMAGE
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
