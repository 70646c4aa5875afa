"""Stager: a batch's rows staged by the caller and helper threads write every row once, into
the same buffer a serial copy gives, and an error in any chunk reaches the caller."""
import os
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hetflow.backends.staging import MIN_ROWS, Stager, row_chunks

CORES = sorted(os.sched_getaffinity(0))


@given(rows=st.integers(1, 64), stagers=st.integers(1, 8))
def test_row_chunks_cover_the_rows_once(rows, stagers):
    chunks = row_chunks(rows, stagers)
    assert chunks[0][0] == 0 and chunks[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))  # contiguous, disjoint
    assert 1 <= len(chunks) <= stagers
    assert len(chunks) == 1 or min(b - a for a, b in chunks) >= MIN_ROWS


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 40), helpers=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_staged_buffer_equals_a_serial_copy(rows, helpers, seed):
    rng = np.random.default_rng(seed)
    frames = [rng.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(rows)]
    got = np.full((rows, 3, 8, 8), np.nan, np.float32)
    calls = []

    def stage_rows(start, end):
        calls.append((start, end, threading.get_ident()))
        for i in range(start, end):
            np.copyto(got[i:i + 1], frames[i])

    stager = Stager([CORES[i % len(CORES)] for i in range(helpers)]).attach()
    try:
        stager.stage(rows, stage_rows)
    finally:
        stager.release()
    np.testing.assert_array_equal(got, np.concatenate(frames))
    assert sorted(c[:2] for c in calls) == row_chunks(rows, 1 + helpers)
    caller = threading.get_ident()
    assert [c[:2] for c in calls if c[2] == caller] == row_chunks(rows, 1 + helpers)[:1]


def test_an_error_in_a_helpers_chunk_reaches_the_caller():
    stager = Stager(CORES[:1]).attach()

    def stage_rows(start, end):
        if start > 0:
            raise ValueError(f"rows {start}-{end}: wrong shape")

    try:
        with pytest.raises(ValueError, match="rows 4-8: wrong shape"):
            stager.stage(8, stage_rows)
    finally:
        stager.release()


def test_helpers_close_after_the_last_lane_releases():
    stager = Stager(CORES[:1])
    stager.attach(), stager.attach()
    stager.stage(4, lambda a, b: None)
    stager.release()
    assert stager._pool is not None  # one lane still uses it
    stager.release()
    assert stager._pool is None
    calls = []
    stager.stage(4, lambda a, b: calls.append((a, b, threading.get_ident())))
    assert calls == [(0, 4, threading.get_ident())]  # closed: the caller stages every row
