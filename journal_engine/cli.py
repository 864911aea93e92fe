"""`journal-engine`: run the demo, print, verify, inspect and compact journals."""
from __future__ import annotations

import argparse
import json
import mmap
import os
import sys

from . import IMPLEMENTATION, Journal, JournalError
from ._impl import scan_frames
from .record_format import FrameCheck, RecordKind
from .storage.format import stamp_of
from .storage.recovery import analyze


def _cmd_demo(args) -> int:
    from . import demo
    return demo.main(args.demo_args)


def _cmd_print(args) -> int:
    """Every frame of every data file, in replay order (like Artemis `data print`)."""
    analysis = analyze(args.directory)
    for data in analysis.listing.data:
        print(f"# {data.path}: file id {data.header.file_id}, sequence {data.header.sequence}"
              + (" (compacted)" if data.header.flags & 1 else ""))
        with open(data.path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            frames = scan_frames(view, stamp_of(data.header.file_id), data.header.data_start)
        for offset, check, kind, user_type, record_id, tx_id, body in frames:
            if check != FrameCheck.VALID:
                label = FrameCheck(check).name
                if label != "ZERO" or frames[-1][0] != offset:
                    print(f"{offset:>10}  {label}")
                continue
            if kind == RecordKind.PAD and not args.pads:
                continue
            shown = body[: args.bytes].hex() + ("…" if len(body) > args.bytes else "")
            print(f"{offset:>10}  {RecordKind(kind).name:<9} id={record_id} type={user_type} tx={tx_id} "
                  f"len={len(body)} {shown}")
    return 0


def _report_dict(analysis) -> dict:
    report = analysis.report
    return {
        "files": len(analysis.listing.data),
        "records_read": report.records_read,
        "live_records": len(analysis.state.records),
        "open_transactions": len(analysis.state.transactions),
        "torn_tail": list(report.torn_tail) if report.torn_tail else None,
        "corrupt": [list(c) for c in report.corrupt],
        "anomalies": len(report.anomalies),
        "interrupted_compaction": analysis.interrupted_compaction,
    }


def _cmd_verify(args) -> int:
    """Read-only check: exit 0 when clean, 1 when a torn tail or damage is found."""
    analysis = analyze(args.directory)
    info = _report_dict(analysis)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(f"{info['files']} files, {info['records_read']} frames, {info['live_records']} live records, "
              f"{info['open_transactions']} open transactions")
        if info["torn_tail"]:
            print(f"torn tail at {info['torn_tail'][0]} offset {info['torn_tail'][1]} (load() truncates it)")
        for path, offset, reason in analysis.report.corrupt:
            print(f"DAMAGE {path} offset {offset}: {reason}")
        if info["interrupted_compaction"]:
            print("an interrupted compaction is pending (load() finishes it)")
        print("clean" if analysis.report.clean else "not clean")
    return 0 if analysis.report.clean else 1


def _cmd_stats(args) -> int:
    with Journal(args.directory, read_only=True) as journal:   # an inspection writes nothing
        journal.load()
        print(json.dumps(journal.stats(), indent=2))
    return 0


def _cmd_compact(args) -> int:
    with Journal(args.directory) as journal:
        journal.load()
        before = journal.stats()
        journal.compact()
        after = journal.stats()
        print(f"compacted: {before['data_files']} data files ({before['live_bytes']} live bytes) -> "
              f"{after['data_files']} data files, including the new active file")
    return 0


def _cmd_bench(args) -> int:
    """Durability benchmarks against the peers and the machine's own limits (docs/benchmarks.md)."""
    from .benchmarking import runner
    return runner.main(args)


def _cmd_serve_stomp(args) -> int:
    """A STOMP broker (coilmq) whose queues live in a journal_engine store (docs/integrations.md)."""
    try:
        from .integrations.coilmq import serve
    except ImportError as exc:
        print(f"journal-engine serve-stomp: {exc}; install it with: pip install 'journal_engine[coilmq]'",
              file=sys.stderr)
        return 2
    return serve(args.data, args.port, args.host, backend=args.backend, sync=args.sync,
                 max_delivery_attempts=args.max_delivery_attempts, dead_letter_queue=args.dead_letter_queue or None,
                 redelivery_delay_ms=args.redelivery_delay_ms)


def _cmd_crash_test(args) -> int:
    from .crashtest.command import run
    return run(args.size, args.seed, args.json_path, args.scratch, args.store)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="journal-engine", description=__doc__)
    parser.add_argument("--version", action="version", version=f"journal_engine ({IMPLEMENTATION} core)")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="write from a child process, SIGKILL it, recover and report "
                                    "(options: journal-engine demo --help)", add_help=False)
    p.set_defaults(func=_cmd_demo)
    p = sub.add_parser("print", help="print every frame of a journal directory")
    p.add_argument("directory")
    p.add_argument("--bytes", type=int, default=16, help="body bytes to show in hex")
    p.add_argument("--pads", action="store_true", help="show PAD frames too")
    p.set_defaults(func=_cmd_print)
    p = sub.add_parser("verify", help="check a journal without changing it")
    p.add_argument("directory")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_verify)
    p = sub.add_parser("stats", help="recover a journal and print its statistics")
    p.add_argument("directory")
    p.set_defaults(func=_cmd_stats)
    p = sub.add_parser("compact", help="recover a journal and compact it")
    p.add_argument("directory")
    p.set_defaults(func=_cmd_compact)
    p = sub.add_parser("bench", help="benchmark the journal, the LMDB store and their peers against this machine's "
                                     "own limits (--quick: about a minute)")
    from .benchmarking.runner import add_arguments as add_bench_arguments
    add_bench_arguments(p)
    p.set_defaults(func=_cmd_bench)
    p = sub.add_parser("serve-stomp", help="run a STOMP broker (coilmq) on a journal_engine store")
    p.add_argument("--data", required=True, help="the store's directory (created if missing)")
    p.add_argument("--port", type=int, default=61613, help="0: any free port (the first line printed tells)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--backend", choices=("journal", "lmdb"), default="journal")
    p.add_argument("--sync", choices=("group", "always", "none"), default="group")
    p.add_argument("--max-delivery-attempts", type=int, default=10, help="-1: unlimited")
    p.add_argument("--dead-letter-queue", default="/queue/DLQ", help="empty: drop what fails too often")
    p.add_argument("--redelivery-delay-ms", type=int, default=0)
    p.set_defaults(func=_cmd_serve_stomp)
    p = sub.add_parser("crash-test", help="crash a journal workload in every fault mode, recover, check every "
                                          "invariant; prints violations: N (docs/crash-testing.md)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--ci", dest="size", action="store_const", const="ci", help="the CI-size campaign")
    size.add_argument("--long", dest="size", action="store_const", const="long", help="the nightly campaign")
    size.add_argument("--smoke", dest="size", action="store_const", const="smoke",
                      help="a few seconds of each fault mode (for test suites)")
    p.add_argument("--seed", type=int, default=None, help="makes the campaign repeatable")
    p.add_argument("--json", dest="json_path", metavar="FILE", help="write the report as JSON")
    p.add_argument("--scratch", metavar="DIR", help="where the crashed journals go (default: a temporary directory)")
    p.add_argument("--store", default="journal",
                   help="journal, lmdb, or a factory of your own record store: package.module:factory")
    p.set_defaults(func=_cmd_crash_test, size="quick")
    args, extra = parser.parse_known_args(argv)
    if args.command == "demo":
        args.demo_args = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "directory", None) is not None and not os.path.isdir(args.directory):
        parser.error(f"{args.directory}: not a directory")
    try:
        return args.func(args)
    except JournalError as exc:
        print(f"journal-engine: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:   # `journal-engine print ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
