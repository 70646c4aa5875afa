"""The schedule as data: one frame's firings, their readiness frame after frame, dispatch to
members and in-order release, checked on random DAGs and mappings against oracles that read the
CSDF application directly."""
import random

from hypothesis import given, settings, strategies as st

from hetflow.dataflow.csdf import cnn_to_csdf
from hetflow.model.synthetic import random_cnn_graph
from hetflow.plan.schedule import Dispatch, InOrder, firings

GRAPHS = {s: random_cnn_graph(16, s) for s in range(4)}


def random_app(seed, data, policy):
    graph = GRAPHS[seed]
    assignment = {l.name: data.draw(st.sampled_from(["a", "b", "c"])) for l in graph.layers}
    return cnn_to_csdf(graph, assignment, policy)


@settings(max_examples=40, deadline=None)
@given(seed=st.sampled_from(sorted(GRAPHS)), data=st.data(),
       policy=st.sampled_from(["paper", "maximal"]))
def test_firings_put_producers_first_and_phases_in_order(seed, data, policy):
    app = random_app(seed, data, policy)
    order = firings(app)
    pos = {(f.actor, f.phase): i for i, f in enumerate(order)}
    assert sorted(pos) == sorted((a, p.index) for a, ps in app.phases.items() for p in ps)
    for c in app.channels:
        assert pos[(c.src, c.src_phase)] < pos[(c.dst, c.dst_phase)]
    for a, ps in app.phases.items():
        assert [pos[(a, p.index)] for p in ps] == sorted(pos[(a, p.index)] for p in ps)
    for f in order:  # a firing returns every tensor it sends and every model output it makes
        sent = {c.tensor for c in app.channels if c.src == f.actor and c.src_phase == f.phase}
        assert sent <= set(f.returns)
        for d in f.deps:  # its dependencies come first
            assert d < pos[(f.actor, f.phase)]
    assert {t for f in order for t in f.returns} >= set(app.model_outputs)
    read = {t for f in order for t in f.source_inputs}
    assert read == set(app.model_inputs)


@settings(max_examples=80, deadline=None)
@given(pattern=st.one_of(st.none(), st.lists(st.integers(0, 3), min_size=1, max_size=8)),
       frames=st.integers(0, 40), seed=st.integers(0, 1000),
       iterate=st.booleans())
def test_dispatch_gives_every_frame_once(pattern, frames, seed, iterate):
    """Members asking in any interleaving, one frame at a time (`take`) or as the engine's
    workers do (each iterating `frames_of(j)`), get every frame once, a static pattern's
    member the frames the pattern gives it."""
    members = 4 if pattern is None else max(pattern) + 1
    d = Dispatch(pattern, frames)
    rng = random.Random(seed)
    its = {j: d.frames_of(j) for j in range(members)} if iterate else {}
    got: dict[int, int] = {}
    live = list(range(members))
    while live:
        j = rng.choice(live)
        f = next(its[j], None) if iterate else d.take(j)
        if f is None:
            live.remove(j)
            continue
        assert f not in got
        got[f] = j
        if pattern:
            assert pattern[f % len(pattern)] == j
    assert sorted(got) == list(range(frames))


@settings(max_examples=80, deadline=None)
@given(pattern=st.one_of(st.none(), st.lists(st.integers(0, 3), min_size=1, max_size=8)),
       frames=st.integers(0, 40), seed=st.integers(0, 1000),
       blocks=st.lists(st.integers(1, 6), min_size=4, max_size=4))
def test_a_block_of_the_dynamic_dispatch_is_consecutive_frames(pattern, frames, seed, blocks):
    """Members asking in any interleaving, some for blocks of frames (`take_block`, a batched
    lane) and some frame by frame, get every frame once; a dynamic dispatch's block is
    consecutive frames, a static pattern's the member's next frames in the pattern; a block
    falls short only at the stream's end."""
    members = 4 if pattern is None else max(pattern) + 1
    d = Dispatch(pattern, frames, blocks=True)
    rng = random.Random(seed)
    got: dict[int, int] = {}
    mine: dict[int, list[int]] = {j: [] for j in range(members)}
    live = list(range(members))
    while live:
        j = rng.choice(live)
        n = blocks[j]
        block = d.take_block(j, n) if n > 1 else [f for f in [d.take(j)] if f is not None]
        if not block:
            live.remove(j)
            continue
        assert not set(block) & set(got) and len(block) <= n
        if pattern is None:
            assert block == list(range(block[0], block[0] + len(block)))
            assert len(block) == n or block[-1] == frames - 1
        else:
            assert all(pattern[f % len(pattern)] == j for f in block)
            assert block == sorted(block) and (not mine[j] or block[0] > mine[j][-1])
        mine[j] += block
        got.update((f, j) for f in block)
    assert sorted(got) == list(range(frames))
    if pattern:  # each member got all of its frames, in order
        assert all(mine[j] == [f for f in range(frames) if pattern[f % len(pattern)] == j]
                   for j in range(members))


@settings(max_examples=60, deadline=None)
@given(ends=st.lists(st.floats(0, 100), min_size=1, max_size=30), seed=st.integers(0, 1000))
def test_in_order_release_is_in_order_at_the_latest_completion_so_far(ends, seed):
    order = InOrder(len(ends))
    order.CHUNK = 2  # several looks at the completion times per release
    arrivals = list(enumerate(ends))
    random.Random(seed).shuffle(arrivals)
    out, done = [], set()
    for f, at in arrivals:
        order.complete(f, at)
        done.add(f)
        start, stop = order.release(len(ends))
        assert start == len(out)
        assert all(g in done for g in range(stop)) and (stop == len(ends) or stop not in done)
        out += [(g, order.released_at[g]) for g in range(start, stop)]
    assert [f for f, _ in out] == list(range(len(ends)))
    assert [t for _, t in out] == [max(ends[:f + 1]) for f in range(len(ends))]
    assert list(order.completed_at) == ends
