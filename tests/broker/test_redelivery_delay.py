"""The redelivery delay formula (Artemis QueueImpl.calculateRedeliveryDelay) and its worked examples:
the manual's, MultipliedDelayedMessageTest's, collision avoidance with seeded and scripted randomness,
the cap applied last, Java's truncation, and the explicit per-attempt list extension."""
from __future__ import annotations

import random

import pytest
import scripted_random

from journal_engine import AddressSettings, AddressSettingsRepository

pytestmark = pytest.mark.same_on_both   # the delay formula in Python, no core object


class ScriptedRandom(scripted_random.ScriptedRandom):
    """A Random whose random() returns the given draws in order: the manual's 'values chosen using
    java.util.Random', replayed exactly."""

    def __new__(cls, *draws: float):
        return super().__new__(cls, draws)

    def __init__(self, *draws: float) -> None:
        super().__init__(draws)


# Sign draws: below 0.5 is Java's nextBoolean() == true, the positive sign.
PLUS, MINUS = 0.25, 0.75


def test_manual_example_5000_multiplier_2_capped_at_15000():
    settings = AddressSettings(redelivery_delay=5000, redelivery_delay_multiplier=2, max_redelivery_delay=15000,
                               redelivery_collision_avoidance_factor=0.0)
    assert [settings.redelivery_delay_for(count) for count in (1, 2, 3)] == [5000, 10000, 15000]
    assert settings.redelivery_delay_for(4) == 15000


def test_multiplied_delayed_message_test_100_doubling_to_1000():
    settings = AddressSettings(redelivery_delay=100, redelivery_delay_multiplier=2.0, max_redelivery_delay=1000)
    assert [settings.redelivery_delay_for(count) for count in range(1, 7)] == [100, 200, 400, 800, 1000, 1000]


def test_delivery_counts_zero_and_one_both_wait_the_base_delay():
    settings = AddressSettings(redelivery_delay=250, redelivery_delay_multiplier=3.0)
    assert settings.redelivery_delay_for(0) == 250
    assert settings.redelivery_delay_for(1) == 250
    assert settings.redelivery_delay_for(2) == 750


def test_default_cap_is_ten_times_the_delay():
    settings = AddressSettings(redelivery_delay=1000, redelivery_delay_multiplier=3.0)
    assert [settings.redelivery_delay_for(count) for count in range(1, 5)] == [1000, 3000, 9000, 10000]


def test_no_delay_by_default():
    assert AddressSettings().redelivery_delay_for(1) == 0
    assert AddressSettings().redelivery_delay_for(50) == 0
    assert AddressSettings(redelivery_delay_multiplier=5.0).redelivery_delay_for(3) == 0


def test_hornetq_manual_example_multiplier_one_and_a_half():
    settings = AddressSettings.from_xml("""<address-setting match="jms.queue.exampleQueue">
          <redelivery-delay-multiplier>1.5</redelivery-delay-multiplier>
          <redelivery-delay>5000</redelivery-delay>
          <max-redelivery-delay>50000</max-redelivery-delay>
        </address-setting>""")
    assert [settings.redelivery_delay_for(c) for c in range(1, 8)] == [5000, 7500, 11250, 16875, 25312, 37968, 50000]


def test_the_multiplied_delay_is_truncated_like_a_java_long_cast():
    settings = AddressSettings(redelivery_delay=333, redelivery_delay_multiplier=1.5, max_redelivery_delay=10**9)
    assert settings.redelivery_delay_for(2) == 499         # 499.5 truncated, not rounded
    assert settings.redelivery_delay_for(3) == 749         # 749.25


def test_a_multiplier_below_one_shrinks_the_delay():
    settings = AddressSettings(redelivery_delay=1000, redelivery_delay_multiplier=0.5)
    assert [settings.redelivery_delay_for(c) for c in (1, 2, 3)] == [1000, 500, 250]


def test_huge_delivery_counts_saturate_at_the_cap_without_overflow():
    settings = AddressSettings(redelivery_delay=1000, redelivery_delay_multiplier=2.0)
    assert settings.redelivery_delay_for(100_000) == 10_000
    uncapped = AddressSettings(redelivery_delay=1000, redelivery_delay_multiplier=2.0, max_redelivery_delay=2**63 - 1)
    assert uncapped.redelivery_delay_for(100_000) == 2**63 - 1


def test_merged_settings_cap_from_a_less_specific_match():
    repository = AddressSettingsRepository()
    repository.add("#", AddressSettings(max_redelivery_delay=4000))
    repository.add("orders", AddressSettings(redelivery_delay=1000, redelivery_delay_multiplier=2.0))
    settings = repository.get("orders")
    assert [settings.redelivery_delay_for(c) for c in range(1, 5)] == [1000, 2000, 4000, 4000]


# -------------------------------------------------------------------------------- collision avoidance

def test_manual_collision_avoidance_examples_replayed_with_the_same_draws():
    settings = AddressSettings(redelivery_delay=1000, redelivery_delay_multiplier=1, max_redelivery_delay=15000,
                               redelivery_collision_avoidance_factor=0.5)
    assert settings.redelivery_delay_for(1, ScriptedRandom(MINUS, 0.25)) == 875    # 1000 + 1000 * (-0.5 * .25)
    assert settings.redelivery_delay_for(2, ScriptedRandom(PLUS, 0.75)) == 1375    # 1000 + 1000 * (0.5 * .75)
    assert settings.redelivery_delay_for(3, ScriptedRandom(MINUS, 0.05)) == 975    # 1000 + 1000 * (-0.5 * .05)


def test_variance_applies_to_the_multiplied_delay_not_the_base_delay():
    # The manual says the variance is "multiplied by the redelivery-delay"; Artemis multiplies the
    # delay already raised by the multiplier: 4000 * (1 + 0.5 * 0.5) = 5000, not 4000 + 1000 * 0.25.
    settings = AddressSettings(redelivery_delay=1000, redelivery_delay_multiplier=2.0, max_redelivery_delay=10**6,
                               redelivery_collision_avoidance_factor=0.5)
    assert settings.redelivery_delay_for(3, ScriptedRandom(PLUS, 0.5)) == 5000


def test_the_cap_applies_after_the_variance():
    settings = AddressSettings(redelivery_delay=1000, max_redelivery_delay=1100,
                               redelivery_collision_avoidance_factor=0.5)
    assert settings.redelivery_delay_for(1, ScriptedRandom(PLUS, 0.75)) == 1100    # 1375 capped
    assert settings.redelivery_delay_for(1, ScriptedRandom(MINUS, 0.75)) == 625    # below the cap: kept
    rng = random.Random(99)
    assert max(settings.redelivery_delay_for(1, rng) for _ in range(2000)) == 1100


def test_the_variance_result_is_truncated_toward_zero():
    settings = AddressSettings(redelivery_delay=3, redelivery_collision_avoidance_factor=0.5)
    assert settings.redelivery_delay_for(1, ScriptedRandom(PLUS, 0.5)) == 3        # 3.75 -> 3
    assert settings.redelivery_delay_for(1, ScriptedRandom(MINUS, 0.5)) == 2       # 2.25 -> 2


@pytest.mark.parametrize("factor", [0.15, 0.5, 1.0])
def test_seeded_collision_avoidance_stays_in_range_and_is_reproducible(factor):
    settings = AddressSettings(redelivery_delay=10_000, redelivery_collision_avoidance_factor=factor,
                               max_redelivery_delay=10**9)
    first = [settings.redelivery_delay_for(1, random.Random(1234)) for _ in range(3)]
    assert len(set(first)) == 1                                   # the same seed, the same delay
    rng = random.Random(42)
    samples = [settings.redelivery_delay_for(1, rng) for _ in range(4000)]
    low, high = 10_000 * (1 - factor), 10_000 * (1 + factor)
    assert all(low <= s < high for s in samples)
    assert min(samples) < 10_000 < max(samples)                   # both signs are drawn
    assert len(set(samples)) > 100
    again = random.Random(42)
    assert samples == [settings.redelivery_delay_for(1, again) for _ in range(4000)]


def test_no_factor_draws_nothing_from_the_rng():
    settings = AddressSettings(redelivery_delay=1000, redelivery_delay_multiplier=2.0)
    rng = random.Random(5)
    state = rng.getstate()
    settings.redelivery_delay_for(3, rng)
    assert rng.getstate() == state


def test_without_an_rng_the_module_random_source_is_used():
    settings = AddressSettings(redelivery_delay=1000, redelivery_collision_avoidance_factor=0.5)
    values = {settings.redelivery_delay_for(1) for _ in range(200)}
    assert all(500 <= v < 1500 for v in values)
    assert len(values) > 10


# ------------------------------------------------------------------ explicit per-attempt delay list

def test_explicit_delays_come_first_then_the_formula():
    settings = AddressSettings(redelivery_delays=[100, 5000], redelivery_delay=1000, redelivery_delay_multiplier=2.0)
    assert [settings.redelivery_delay_for(c) for c in range(0, 6)] == [100, 100, 5000, 4000, 8000, 10000]


def test_explicit_delays_are_not_capped_but_do_get_collision_avoidance():
    settings = AddressSettings(redelivery_delays=[50_000], max_redelivery_delay=1000)
    assert settings.redelivery_delay_for(1) == 50_000
    assert settings.redelivery_delay_for(2) == 0                   # past the list: delay 0 x multiplier
    jittered = AddressSettings(redelivery_delays=[1000], redelivery_collision_avoidance_factor=0.5)
    assert jittered.redelivery_delay_for(1, ScriptedRandom(PLUS, 0.5)) == 1250


def test_explicit_delays_merge_like_any_field():
    repository = AddressSettingsRepository()
    repository.add("#", AddressSettings(redelivery_delays=[1, 2, 3]))
    repository.add("orders", AddressSettings(redelivery_delay=10))
    assert repository.get("orders").redelivery_delays == (1, 2, 3)
    assert repository.get("orders").redelivery_delay_for(4) == 10


def test_delivery_count_must_be_an_integer():
    with pytest.raises(TypeError):
        AddressSettings().redelivery_delay_for("1")
    with pytest.raises(TypeError):
        AddressSettings().redelivery_delay_for(True)
