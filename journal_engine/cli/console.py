"""Output of the commands: rich tables and progress for people, JSON for programs, one-line errors.

Exit statuses (docs/cli.md): 0 done / healthy; 1 damage found (verify; stats, export, dlq list
and compact of damaged files; an export cut short or changed given to import; a corrupt journal a
command could not read); 2 bad usage, no journal where one was expected, a file that is no export,
an optional package not installed; 3 an I/O error (a missing permission, a failing disk); 4 the
journal is in use by another process.
"""
from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from typing import Iterator

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

EXIT_OK = 0
EXIT_DAMAGE = 1
EXIT_USAGE = 2
EXIT_IO = 3
EXIT_IN_USE = 4

_WIDTH_WHEN_PIPED = 160


class ResultConsole(Console):
    """A console whose closed pipe (``journal-engine stats DIR | head``) raises ``BrokenPipeError`` for the
    command line's one handler (exit status 0, quiet), where rich's own would exit with 1, the status of
    damage."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError("stdout was closed by its reader")


def end_quietly_on_closed_pipe() -> int:
    """What a command whose reader went away ends with: nothing more is written (stdout points at
    /dev/null, so the interpreter's last flush cannot fail either) and the status is 0."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):     # a stdout without a file descriptor (a test's capture): nothing to flush
        pass
    finally:
        os.close(devnull)
    return 0


def stdout(*, markup: bool = False, highlight: bool = False) -> Console:
    """The console of results: tables keep their columns when piped (no 80-column squeeze). Markup is off
    unless asked for: paths, reasons and record fields are data, and "[...]" in them is not a style tag
    (`bench` styles its own tables)."""
    out = sys.stdout        # looked up at each call: click's test runner swaps it (get_text_stream is deprecated)
    console = ResultConsole(file=out, highlight=highlight, soft_wrap=False, markup=markup)
    if not console.is_terminal:
        console = ResultConsole(file=out, highlight=highlight, width=_WIDTH_WHEN_PIPED, color_system=None,
                                markup=markup)
    return console


def stderr() -> Console:
    return Console(file=sys.stderr, highlight=False, markup=False)


def emit_json(document) -> None:
    """One JSON document on stdout (what ``--json`` promises a program)."""
    click.echo(json.dumps(document, indent=2, default=str))


def emit_json_line(document) -> None:
    """One NDJSON line on stdout."""
    click.echo(json.dumps(document, separators=(",", ":"), default=str))


@contextmanager
def progress(description: str, total: int | None) -> Iterator:
    """A progress bar on stderr while long work runs (none when stderr is not a terminal, or with
    JOURNAL_ENGINE_NO_PROGRESS set); yields advance(n=1)."""
    console = stderr()
    if not console.is_terminal or os.environ.get("JOURNAL_ENGINE_NO_PROGRESS"):
        yield lambda n=1: None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


def fail_line(message: str) -> None:
    """The one line an operating error gives (on stderr)."""
    print(f"journal-engine: error: {message}", file=sys.stderr)
