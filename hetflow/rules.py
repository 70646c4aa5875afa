"""The measured rules of thumb hetflow decides by, each with where it comes from.

A rule is a figure read off many `hetflow bench` runs, not a law: each record says what it is,
how it was measured and which fields of the bench's JSON (`hetflow bench ... --report DIR`
writes DIR/bench.json) it is read from, so that it can be measured again on another machine.
Code reads `RULE.value`; tests check the properties a rule must keep (a margin above 1, a
spread above 0), never its figure.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    name: str
    value: float
    what: str  # what the figure means where it is used
    measured: str  # how it was measured, in words
    command: str  # the hetflow command whose JSON it is read from, and the fields


_PLAN_ROWS = ("models[].rows[] with kind \"plan\": the chosen pilot is the entry of rows[].pilots "
              "with chosen true")

PILOT_CHALLENGE = Rule(
    "pilot challenge margin", 1.05,
    "a pilot must measure more than this times the incumbent design's pilot (the parallel "
    "copies') to take its place; also the margin by which a balanced plan's pilot must beat the "
    "best throughput plan's to run head to head in its place",
    "pilots of one bench read CPU-group designs up to 8% above what the same designs ran "
    "minutes later beside the parallel copies, while the copies' own design held within 1-5%: "
    "the margin is the pilots' noise on a design that does not change",
    "hetflow bench MODEL --head-to-head 5 --report DIR, repeated; in bench.json, "
    + _PLAN_ROWS + ": pilot_throughput against the row's throughput and against "
    "models[].notes.head_to_head.ratio")

PILOT_RATE_DRIFT = Rule(
    "pilot rate drift", -0.026,
    "mean of log(full-run rate / pilot rate): how far a full run reads below its pilot",
    "over many plan rows of benches on one machine: the mean of log(throughput / the chosen "
    "pilot's pilot_throughput)",
    "hetflow bench MODEL ... --report DIR; bench.json " + _PLAN_ROWS
    + "; fields rows[].throughput and the chosen pilot's pilot_throughput")

PILOT_RATE_SPREAD = Rule(
    "pilot rate spread", 0.073,
    "standard deviation of log(full-run rate / pilot rate)",
    "as the rate drift: their standard deviation",
    PILOT_RATE_DRIFT.command)

PILOT_P99_DRIFT = Rule(
    "pilot p99 drift", 0.034,
    "mean of log(full-run p99 / pilot p99)",
    "over many plan rows: the mean of log(latency_p99 / the chosen pilot's pilot_latency_p99)",
    "hetflow bench MODEL ... --report DIR; bench.json " + _PLAN_ROWS
    + "; fields rows[].latency_p99 and the chosen pilot's pilot_latency_p99")

PILOT_P99_SPREAD = Rule(
    "pilot p99 spread", 0.167,
    "standard deviation of log(full-run p99 / pilot p99): a p99 moves about twice as far as a "
    "rate from pilot to run",
    "as the p99 drift: their standard deviation",
    PILOT_P99_DRIFT.command)

PILOT_ROOM = Rule(
    "room under a latency cap", 0.8,
    "a pilot whose p99 is at most this share of the cap has room under it",
    "full runs of capped designs measured their p99 up to 1.25x (1 / 0.8) their pilot's in "
    "most cases; a pilot above this share often broke the cap in its run",
    "hetflow bench MODEL --report DIR; bench.json rows named \"hetflow balanced\": "
    "latency_p99 over the chosen pilot's pilot_latency_p99, and over the cap "
    "(models[].notes.head_to_head_balanced.latency_cap times the parallel copies' p99)")

PILOT_SAME_RATE = Rule(
    "same pilot rate", 0.95,
    "pilot rates within this share of each other are not told apart by a pilot",
    "the spread of the pilot rate of one design piloted twice in one bench (a design shared "
    "by two plan kinds)",
    "hetflow bench MODEL --report DIR; bench.json rows[].pilots[]: pilot_throughput of "
    "entries with the same design across plan kinds")

BALANCED_TAIL = Rule(
    "balanced p99 over predicted latency", 1.47,
    "a predicted latency is a median, the balanced plan's cap a p99: the balanced search keeps "
    "designs whose predicted latency times this is within the cap (else, none being, within "
    "the cap itself)",
    "full runs of data-parallel designs with CPU members: the median of their measured p99 "
    "over their a priori predicted latency (their p50 was about 1.0x it)",
    "hetflow bench MODEL --report DIR; bench.json " + _PLAN_ROWS
    + "; fields rows[].latency_p99 over rows[].predicted_latency")

QUICK_MODEL_SECONDS = Rule(
    "quick bench budget", 80.0,
    "`hetflow bench --quick`: each model's wall-clock budget in seconds unless --budget is "
    "given",
    "the budget's estimates are rough; this budget kept one model's whole quick bench within "
    "90 s on the machines measured",
    "hetflow bench MODEL --quick --report DIR; bench.json models[].notes.seconds and "
    "models[].notes.budget.spent")

ALL = (PILOT_CHALLENGE, PILOT_RATE_DRIFT, PILOT_RATE_SPREAD, PILOT_P99_DRIFT, PILOT_P99_SPREAD,
       PILOT_ROOM, PILOT_SAME_RATE, BALANCED_TAIL, QUICK_MODEL_SECONDS)
