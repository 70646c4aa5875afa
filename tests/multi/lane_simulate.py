"""A discrete-event simulation of the streams-and-lanes scheduling model, written apart from the
analysis to check it: every stream of an application releases a frame every period from its own
offset; a task is ready when its predecessors' data (of the same frame) has arrived; an element
has k lanes, and whenever one is free it starts the waiting task of the highest priority, among
equal priority the one ready first (then the frame released first); nothing is preempted.
Where an application fires b frames at a time on an element (`AppSchedule.batch`), the lane
also takes up to b - 1 more waiting frames of that task (oldest first) into the firing, whose
time is the task's whatever the count. Frames of one stream do not wait for each other."""
from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass
class Outcome:
    worst: dict[str, float]  # app -> largest response seen
    missed: dict[str, int]  # app -> frames done after their deadline
    frames: dict[str, int]  # app -> frames done


def simulate_streams(apps, lanes: dict[str, int], offsets: dict[tuple[str, int], float],
                     horizon: float) -> Outcome:
    """Run every frame released before `horizon` to its end; `offsets[(app, stream)]`: the
    stream's first release (missing: 0)."""
    events: list[tuple] = []
    seq = 0

    def at(t: float, kind: str, payload) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, payload))
        seq += 1

    by_name = {a.name: a for a in apps}
    preds = {a.name: [0] * len(a.tasks) for a in apps}
    succs = {a.name: [[] for _ in a.tasks] for a in apps}
    for a in apps:
        for src, dst, delay in a.edges:
            preds[a.name][dst] += 1
            succs[a.name][src].append((dst, delay))
    for a in apps:
        for s in range(a.streams):
            t0 = offsets.get((a.name, s), 0.0)
            j = 0
            while t0 + j * a.period < horizon:
                at(t0 + j * a.period, "release", (a.name, s, j))
                j += 1

    queues: dict[str, list] = {}
    free = dict(lanes)
    unmet: dict[tuple, int] = {}
    left: dict[tuple, int] = {}
    released: dict[tuple, float] = {}
    out = Outcome({a.name: 0.0 for a in apps}, {a.name: 0 for a in apps},
                  {a.name: 0 for a in apps})

    def ready(t: float, frame: tuple, i: int) -> None:
        a = by_name[frame[0]]
        e = a.tasks[i].element
        heapq.heappush(queues.setdefault(e, []), (a.priority, t, released[frame], frame, i))

    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, _, kind, p = heapq.heappop(events)
            if kind == "release":
                a = by_name[p[0]]
                released[p] = now
                left[p] = len(a.tasks)
                for i in range(len(a.tasks)):
                    unmet[(p, i)] = preds[a.name][i]
                    if unmet[(p, i)] == 0:
                        ready(now, p, i)
            elif kind == "arrive":
                frame, i = p
                unmet[(frame, i)] -= 1
                if unmet[(frame, i)] == 0:
                    ready(now, frame, i)
            else:  # a firing ends
                frames, i, e = p
                free[e] = free.get(e, 1) + 1
                a = by_name[frames[0][0]]
                for frame in frames:
                    for j, delay in succs[a.name][i]:
                        at(now + delay, "arrive", (frame, j))
                    left[frame] -= 1
                    if left[frame] == 0:
                        r = now - released[frame]
                        out.worst[a.name] = max(out.worst[a.name], r)
                        out.frames[a.name] += 1
                        if r > a.relative_deadline + 1e-9:
                            out.missed[a.name] += 1
        for e, q in queues.items():
            while q and free.get(e, 1) > 0:
                _, _, _, frame, i = heapq.heappop(q)
                a = by_name[frame[0]]
                taken = [frame]
                room = a.batch.get(e, 1) - 1
                if room:  # the oldest waiting frames of the same task join the firing
                    same = sorted(x for x in q if x[3][0] == a.name and x[4] == i)[:room]
                    taken += [x[3] for x in same]
                    q[:] = [x for x in q if x not in same]
                    heapq.heapify(q)
                free[e] = free.get(e, 1) - 1
                at(now + a.tasks[i].time, "end", (taken, i, e))
    return out
