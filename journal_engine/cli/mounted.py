"""The products' own commands, mounted: `demo`, `bench`, `crash-test`, `serve-stomp`, `console`, `users add`,
`analyze`.

`bench` and `crash-test` keep the option parsers of their modules (benchmarking.runner, crashtest):
their arguments pass through untouched, so their owners change options in one place.
"""
from __future__ import annotations

import argparse
import os
import sys

import click

from ..limits import SERVED_CONNECTIONS_MAX
from ..storage.backends import BACKENDS, DEFAULT_BACKEND
from .console import EXIT_DAMAGE, EXIT_USAGE, fail_line, stdout
from .damage import Damage, damage_status

__all__ = ["COMMANDS"]

_PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


def _parse(parser: argparse.ArgumentParser, arguments) -> argparse.Namespace | int:
    """argparse's result, or the exit status it chose (--help, a bad option)."""
    try:
        return parser.parse_args(list(arguments))
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else EXIT_USAGE


@click.command("bench", context_settings=_PASS_THROUGH, add_help_option=False)
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
def bench_command(arguments) -> int:
    """Benchmark the journal, the LMDB store and their peers against this machine's own limits
    (--quick: about a minute; --help for the options)."""
    from ..benchmarking import runner
    parser = argparse.ArgumentParser(prog="journal-engine bench", description=bench_command.help)
    runner.add_arguments(parser)
    parsed = _parse(parser, arguments)
    # the tables go through the command line's console: a reader gone away (`| head`) ends the command
    # quietly with status 0, as every printing command does, instead of rich's own exit with 1
    return parsed if isinstance(parsed, int) else runner.main(parsed, out=stdout(markup=True, highlight=True))


def _crash_test_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="journal-engine crash-test", description=crash_test_command.help)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--ci", dest="size", action="store_const", const="ci", help="the CI-size campaign")
    size.add_argument("--long", dest="size", action="store_const", const="long", help="the nightly campaign")
    size.add_argument("--smoke", dest="size", action="store_const", const="smoke",
                      help="a few seconds of each fault mode (for test suites)")
    parser.add_argument("--seed", type=int, default=None, help="makes the campaign repeatable")
    parser.add_argument("--json", dest="json_path", metavar="FILE", help="write the report as JSON")
    parser.add_argument("--scratch", metavar="DIR", help="where the crashed journals go (default: a temporary "
                                                         "directory)")
    parser.add_argument("--store", default="journal",
                        help="journal, lmdb, or a factory of your own record store: package.module:factory")
    parser.set_defaults(size="quick")
    return parser


@click.command("crash-test", context_settings=_PASS_THROUGH, add_help_option=False)
@click.argument("arguments", nargs=-1, type=click.UNPROCESSED)
def crash_test_command(arguments) -> int:
    """Crash a journal workload in every fault mode, recover, check every invariant; prints
    violations: N (docs/crash-testing.md; --help for the options)."""
    from ..crashtest.command import run
    parsed = _parse(_crash_test_parser(), arguments)
    if isinstance(parsed, int):
        return parsed
    return run(parsed.size, parsed.seed, parsed.json_path, parsed.scratch, parsed.store)


@click.command("serve-stomp")
@click.option("--data", required=True, type=click.Path(path_type=str), help="the store's directory (created if missing)")
@click.option("--port", type=int, default=61613, show_default=True, help="0: any free port (the first line printed tells)")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="an address beyond loopback (127.0.0.0/8, ::1) needs --users or --allow-anonymous")
@click.option("--backend", type=click.Choice(list(BACKENDS)), default=DEFAULT_BACKEND, show_default=True)
@click.option("--sync", type=click.Choice(["group", "always", "none"]), default="group", show_default=True)
@click.option("--max-delivery-attempts", type=int, default=10, show_default=True, help="-1: unlimited")
@click.option("--dead-letter-queue", default="/queue/DLQ", show_default=True,
              help="empty: drop what fails too often")
@click.option("--redelivery-delay-ms", type=int, default=0, show_default=True)
@click.option("--users", "users_path", type=click.Path(path_type=str),
              help="users file (journal-engine users add): CONNECT must carry a matching login and passcode")
@click.option("--allow-anonymous", is_flag=True, help="serve a non-loopback --host without --users, on purpose")
@click.option("--tls-cert", type=click.Path(path_type=str), help="PEM certificate (chain): every connection is TLS")
@click.option("--tls-key", type=click.Path(path_type=str), help="PEM private key of --tls-cert")
@click.option("--connections-max", type=int, default=SERVED_CONNECTIONS_MAX, show_default=True,
              help="connections held at once; one more gets an ERROR and is closed")
@click.option("--backup", is_flag=True,
              help="wait for the live server of --data to die (its directory lock), then take over: recover and "
                   "serve on --port (docs/failover.md)")
@click.option("--failback", is_flag=True,
              help="a restarted primary: ask the --backup that serves --data to hand it back, wait for it, then "
                   "serve on --port (docs/failover.md)")
@click.option("--http", "http_port", type=int, metavar="PORT",
              help="also serve the operator's console and /metrics on this port (0: any free one; docs/console.md)")
@click.option("--http-host", default="127.0.0.1", show_default=True,
              help="the console's address; beyond loopback it needs --users or --allow-anonymous")
@click.option("--report", "reports", multiple=True, type=click.Path(dir_okay=False, path_type=str),
              help="a crash-test or bench --json report the console's health page plots (repeatable)")
def serve_stomp_command(data, port, host, backend, sync, max_delivery_attempts, dead_letter_queue,
                        redelivery_delay_ms, users_path, allow_anonymous, tls_cert, tls_key, connections_max,
                        backup, failback, http_port, http_host, reports) -> int:
    """Run a STOMP broker on one event loop whose queues live in a journal_engine store
    (docs/integrations.md). Binds 127.0.0.1 unless --host says otherwise."""
    from ..served import serve
    # the console (aiohttp, Jinja2) is imported only when asked for; a report that is no file is refused
    # before anything is bound
    console = None
    if http_port is not None:
        from ..console import served_console
        console = served_console(reports)
    elif reports:
        raise click.UsageError("--report is for the console: give --http PORT too")
    return serve(data, port, host, backend=backend, sync=sync, max_delivery_attempts=max_delivery_attempts,
                 dead_letter_queue=dead_letter_queue or None, redelivery_delay_ms=redelivery_delay_ms,
                 users_path=users_path, allow_anonymous=allow_anonymous, tls_cert=tls_cert, tls_key=tls_key,
                 connections_max=connections_max, backup=backup, failback=failback, http_port=http_port,
                 http_host=http_host, console=console)


@click.command("console")
@click.argument("directory", type=click.Path(file_okay=False, path_type=str))
@click.option("--port", type=int, default=8161, show_default=True, help="0: any free port (the line printed tells)")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="an address beyond loopback needs --users or --allow-anonymous")
@click.option("--users", "users_path", type=click.Path(path_type=str),
              help="users file (journal-engine users add): every page needs a login of it")
@click.option("--allow-anonymous", is_flag=True, help="serve a non-loopback --host without --users, on purpose")
@click.option("--tls-cert", type=click.Path(path_type=str), help="PEM certificate (chain): the console is HTTPS")
@click.option("--tls-key", type=click.Path(path_type=str), help="PEM private key of --tls-cert")
@click.option("--report", "reports", multiple=True, type=click.Path(dir_okay=False, path_type=str),
              help="a crash-test or bench --json report the health page plots (repeatable)")
def console_command(directory, port, host, users_path, allow_anonymous, tls_cert, tls_key, reports) -> int:
    """The operator's console of a stopped broker's DIRECTORY, read-only: queues, messages, dead letters,
    journal health (docs/console.md). It reads as `dlq list` and `verify` do and never writes; redrive
    and delete are the served broker's (serve-stomp --http)."""
    from ..console import serve_read_only
    from ..served.network import check_exposure
    check_exposure(host, users_path, allow_anonymous)
    return serve_read_only(directory, port, host, users_path=users_path, tls_cert=tls_cert, tls_key=tls_key,
                           reports=reports)


@click.group("users")
def users_group() -> None:
    """The users file of `serve-stomp --users` (docs/integrations.md gives its format)."""


@users_group.command("add")
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@click.argument("login")
@click.option("--replace", is_flag=True, help="set a new password for a login already in FILE")
def users_add_command(file, login, replace) -> int:
    """Add LOGIN to FILE (created 0600 when missing, rewritten atomically). The password is read from
    a prompt on a terminal, else from the first line of stdin; never from the command line."""
    from ..served.users import add_user
    if sys.stdin.isatty():
        password = click.prompt("password", hide_input=True, confirmation_prompt=True)
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        fail_line("users add: an empty password is refused")
        return EXIT_USAGE
    add_user(file, login, password, replace=replace)
    return 0


@click.command("demo")
@click.option("--seconds", type=click.FloatRange(min=0.5), default=4.0, show_default=True,
              help="how long the child broker runs under load before the SIGKILL")
@click.option("--keep", type=click.Path(file_okay=False, path_type=str),
              help="use and keep this directory instead of a temporary one")
@click.option("--png", type=click.Path(dir_okay=False, path_type=str),
              help="where the chart goes (default: journal-engine-demo.png in the --keep directory, else in the "
                   "temporary folder, replaced by the next run)")
@click.option("--seed", type=int, help="seed of the workload and the kill time")
def demo_command(seconds: float, keep, png, seed) -> int:
    """The main job, end to end: a broker with redelivery and dead-letter settings under load, a SIGKILL,
    recovery checked message by message, a DLQ listed and redriven with its audit trail, and a chart."""
    from .. import demo
    try:
        return demo.run(seconds=seconds, keep=keep, png=png, seed=seed)
    except RuntimeError as failure:         # the child broker failed to run: the demo cannot judge
        fail_line(f"demo: {failure}")
        return EXIT_DAMAGE


@click.command("analyze")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--master", help="Spark master URL (default local[*]; under spark-submit its --master holds)")
@click.option("--out", type=click.Path(file_okay=False, path_type=str),
              help="write PNG plots (and with --parquet the records and tables) here")
@click.option("--parquet", is_flag=True, help="also write the records and every table as Parquet")
@click.option("--sent-time-property", metavar="NAME",
              help="a message property holding the send time (epoch ms), for time in queue")
def analyze_command(paths, master, out, parquet, sent_time_property) -> int:
    """Dead letters, delivery counts, redelivery delays, time in queue, live and dead bytes of journals
    (PATH: a journal, a broker's or message store's directory), and summaries of crash-test and bench
    JSON reports, on Spark (docs/spark.md)."""
    try:
        from ..spark.analyze import run
    except ImportError as exc:
        fail_line(f"analyze: {exc}; install it with: pip install '.[spark]' (in the checkout or an unpacked sdist)")
        return EXIT_USAGE
    damaged = run(list(paths), master, out, parquet, sent_time_property)
    # the tables count only what could be read: damage is exit status 1, each place on stderr, as in stats
    damage = [Damage(os.path.dirname(path), path, offset, reason) for path, offset, reason in damaged]
    return damage_status(" ".join(paths), damage, "the analyses count only the records that could be read",
                         "`journal-engine verify PATH` lists the damage")


COMMANDS = [demo_command, bench_command, crash_test_command, serve_stomp_command, console_command, users_group,
            analyze_command]
