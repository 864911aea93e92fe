"""The compiled live-record table against a dict model (and its Python twin against the same model)."""
import pytest
from hypothesis import given, settings, strategies as st

from journal_engine._livemap import LiveMap as CompiledLiveMap
from journal_engine._twin.livemap import LiveMap as TwinLiveMap

KEYS = st.one_of(st.integers(0, 64), st.integers(0, 2**64 - 1), st.sampled_from([0, 2**63, 2**64 - 1]))
OPS = st.lists(st.tuples(st.sampled_from(["put", "pop", "get", "add"]), KEYS, st.integers(0, 10_000)),
               max_size=400)


def _check_against_model(live, ops, model: dict[int, int] | None = None) -> None:
    model = {} if model is None else model
    for op, key, value in ops:
        if op == "put":
            live[key] = value
            model[key] = value
        elif op == "pop":
            assert live.pop(key, None) == model.pop(key, None)
        elif op == "add" and key in model:
            live[key] = live[key] + value
            model[key] += value
        else:
            assert (key in live) == (key in model) and live.get(key) == model.get(key)
    assert len(live) == len(model)
    assert live.total_bytes == sum(model.values())
    assert sorted(live.items()) == sorted(model.items())


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_compiled_live_map_behaves_like_a_dict_with_a_byte_total(ops):
    _check_against_model(CompiledLiveMap(), ops)


@settings(max_examples=50, deadline=None)
@given(OPS)
def test_python_twin_live_map_behaves_like_a_dict_with_a_byte_total(ops):
    _check_against_model(TwinLiveMap(), ops)


def test_growth_through_many_inserts_and_deletes_keeps_every_key():
    live = CompiledLiveMap()
    for key in range(100_000):
        live[key * 7919] = key % 97
    for key in range(0, 100_000, 2):
        del live[key * 7919]
    for key in range(100_000, 150_000):   # reuses tombstones, then grows
        live[key * 7919] = 1
    assert len(live) == 50_000 + 50_000
    assert all(live.get(key * 7919) == key % 97 for key in range(1, 100_000, 2))
    assert all((key * 7919) not in live for key in range(0, 100_000, 2))


def _huge_pages_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as handle:
            return handle.read().split("[")[1].split("]")[0]
    except (OSError, IndexError):
        return "absent"


@pytest.mark.skipif(_huge_pages_mode() not in ("always", "madvise"),
                    reason="the kernel gives no transparent huge pages (transparent_hugepage/enabled)")
def test_a_large_table_faults_once_per_huge_page():
    """A table sized for a recovery's million records lies on transparent huge pages: filling it
    faults once per 2 MiB. From calloc each 4 KiB page would fault twice (read: the zero page;
    write: a copy, whose TLB flush interrupts the threads that scan the next files)."""
    import resource
    from journal_engine.limits import TABLE_HUGE_PAGES_BYTES_MIN
    records = 1_000_000
    live = CompiledLiveMap(records)
    assert records * 8 >= TABLE_HUGE_PAGES_BYTES_MIN
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for key in range(0, records, 64):     # a key every 512 bytes of the table: every page probed and written
        live[key] = 1
    assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults < 100
    assert len(live) == records // 64 and live.total_bytes == records // 64


BASE_OPS = st.lists(st.tuples(st.sampled_from(["put", "pop", "get", "add"]),
                              st.one_of(st.integers(0, 700), st.integers(0, 2**64 - 1)), st.integers(0, 10_000)),
                    max_size=300)


@settings(max_examples=100, deadline=None)
@given(deleted=st.sets(st.integers(0, 599)), updated=st.sets(st.integers(0, 599)), ops=BASE_OPS)
def test_the_live_set_of_a_replay_whose_ids_rose_behaves_like_a_dict(deleted, updated, ops):
    """A replay whose ids rose hands its entries over as the live set's base, where they lie: no
    table is filled at recovery. Puts, removes and byte additions on its ids (live, removed, or
    never there), and on ids only the table holds, keep it a dict with a byte total -- the twin's
    live set to begin with."""
    from journal_engine import _codec, _replay, _scan
    from journal_engine._twin import replay as twin_replay, scan as twin_scan
    from journal_engine.record_format import RecordKind
    stamp = 7
    frames = [_codec.encode_frame(RecordKind.ADD, 1, stamp, record_id, 0, b"x" * (record_id % 13))
              for record_id in range(0, 600, 2)]
    frames += [_codec.encode_frame(RecordKind.UPDATE, 1, stamp, record_id, 0, b"u") for record_id in sorted(updated)]
    frames += [_codec.encode_frame(RecordKind.DELETE, 0, stamp, record_id, 0, b"") for record_id in sorted(deleted)]
    buffer = b"".join(frames) + bytes(64)
    live = _replay.ReplayState()
    live.replay_columns(_scan.scan_columns(buffer, stamp, 0), "file")
    twin = twin_replay.ReplayState()
    twin.replay_columns(twin_scan.scan_columns(buffer, stamp, 0), "file")
    model = dict(twin.live.items())
    assert sorted(live.live.items()) == sorted(model.items()) and live.live.total_bytes == sum(model.values())
    _check_against_model(live.live, ops, model)
