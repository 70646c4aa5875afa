"""The measured rules (hetflow/rules.py): each says where it comes from, and keeps the
properties the code that reads it relies on."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow import rules
from hetflow.mapping.pilot import _pick, keep_chance


@pytest.mark.parametrize("rule", rules.ALL, ids=lambda r: r.name)
def test_every_rule_says_what_it_is_how_it_was_measured_and_the_command(rule):
    assert rule.what and rule.measured
    assert rule.command.startswith("hetflow bench") and "bench.json" in rule.command
    assert math.isfinite(rule.value)


def test_the_rules_keep_their_signs():
    assert rules.PILOT_CHALLENGE.value > 1.0  # a margin: a tie is not a win
    assert rules.PILOT_RATE_SPREAD.value > 0 and rules.PILOT_P99_SPREAD.value > 0
    assert 0 < rules.PILOT_ROOM.value < 1 and 0 < rules.PILOT_SAME_RATE.value < 1
    assert rules.BALANCED_TAIL.value >= 1.0  # a p99 is no shorter than a median
    assert rules.QUICK_MODEL_SECONDS.value > 0


@settings(max_examples=200, deadline=None)
@given(st.floats(1.0, 1e5), st.floats(1.0, 1e5), st.floats(0.2, 5.0))
def test_a_pilot_within_the_challenge_margin_of_the_incumbent_does_not_displace_it(
        incumbent, other, share):
    """Without a cap: the incumbent (the copies' design) stays unless another pilot beats it
    by more than the margin; a tie, or a win within the noise, is not a win."""
    rate = incumbent * min(share, rules.PILOT_CHALLENGE.value * 0.999)
    tried = [{"pilot_throughput": incumbent, "pilot_latency_p99": 0.01},
             {"pilot_throughput": rate, "pilot_latency_p99": 0.01}]
    assert _pick(tried, [0, 1], None, incumbent=0) == 0
    tried[1]["pilot_throughput"] = incumbent * rules.PILOT_CHALLENGE.value * 1.001
    assert _pick(tried, [0, 1], None, incumbent=0) == 1


@settings(max_examples=300, deadline=None)
@given(st.floats(10.0, 1e4), st.floats(1e-4, 0.1), st.floats(1.001, 3.0))
def test_the_chance_to_keep_floor_and_cap_rises_with_the_rate_and_falls_with_the_p99(
        rate, p99, step):
    floor, cap = 1000.0, 0.01
    chance, margin = keep_chance(rate, p99, floor, cap)
    faster, faster_margin = keep_chance(rate * step, p99, floor, cap)
    slower_p99, p99_margin = keep_chance(rate, p99 * step, floor, cap)
    assert 0.0 <= chance <= 1.0
    assert faster >= chance and faster_margin >= margin
    assert slower_p99 <= chance and p99_margin <= margin


def test_a_pilot_on_both_bounds_is_less_likely_than_not_to_keep_them():
    """Read at the floor and at the cap exactly, the pilots' drift (rates fall, p99s rise from
    pilot to run) leaves less than an even chance for each, so less than a quarter for both."""
    chance, margin = keep_chance(1000.0, 0.01, 1000.0, 0.01)
    assert chance < 0.25 and margin < 0
