"""The compiled live-record table against a dict model (and its Python twin against the same model)."""
from hypothesis import given, settings, strategies as st

from journal_engine._livemap import LiveMap as CompiledLiveMap
from journal_engine._twin.livemap import LiveMap as TwinLiveMap

KEYS = st.one_of(st.integers(0, 64), st.integers(0, 2**64 - 1), st.sampled_from([0, 2**63, 2**64 - 1]))
OPS = st.lists(st.tuples(st.sampled_from(["put", "pop", "get", "add"]), KEYS, st.integers(0, 10_000)),
               max_size=400)


def _check_against_model(live, ops) -> None:
    model: dict[int, int] = {}
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
