"""A discrete-event simulation of the multi-application runtime's policy, to check the analysis:
frames released every period (from an offset), a task ready when its predecessors' data has
arrived and its element's previous task of the same application is done, one non-preemptive
server per element taking the ready task of the highest priority (then the earliest frame)."""
from __future__ import annotations

import heapq

from hetflow.multi.schedulability import AppSchedule


def simulate(apps: list[AppSchedule], offsets: dict[str, float], horizon: float
             ) -> dict[str, float]:
    """Largest response time of each application over frames released before `horizon`."""
    events: list[tuple] = []  # (time, seq, kind, payload)
    seq = 0

    def at(t: float, kind: str, payload) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, payload))
        seq += 1

    # per app and element: its tasks in order, to chain an element's tasks across frames
    on = {(a.name, e): [i for i in a.order if a.element_of[i] == e] for a in apps for e in a.elements}
    waiting: dict[tuple, int] = {}  # (app, frame, task) -> unmet dependencies
    done_frame: dict[tuple, int] = {}  # (app, element) -> last frame whose tasks there are done
    left: dict[tuple, int] = {}  # (app, frame) -> tasks not finished
    release: dict[tuple, float] = {}
    worst = {a.name: 0.0 for a in apps}
    queue = {e: [] for a in apps for e in a.elements}
    busy = {e: False for e in queue}
    by_name = {a.name: a for a in apps}

    for a in apps:
        k, t = 0, offsets.get(a.name, 0.0)
        while t < horizon:
            at(t, "release", (a.name, k))
            k += 1
            t = offsets.get(a.name, 0.0) + k * a.period

    def satisfy(app: str, k: int, i: int, t: float) -> None:
        waiting[(app, k, i)] -= 1
        if waiting[(app, k, i)] == 0:
            a = by_name[app]
            heapq.heappush(queue[a.element_of[i]], (a.priority, k, i, app))

    while events:
        t = events[0][0]
        while events and events[0][0] == t:  # everything at time t, then dispatch
            _, _, kind, p = heapq.heappop(events)
            if kind == "release":
                name, k = p
                a = by_name[name]
                release[(name, k)] = t
                left[(name, k)] = len(a.tasks)
                first = {e: ts[0] for (n, e), ts in on.items() if n == name}
                for i in range(len(a.tasks)):
                    extra = 1 if first.get(a.element_of[i]) == i and done_frame.get(
                        (name, a.element_of[i]), -1) < k - 1 else 0
                    waiting[(name, k, i)] = len(a.preds[i]) + extra
                    if waiting[(name, k, i)] == 0:
                        heapq.heappush(queue[a.element_of[i]], (a.priority, k, i, name))
            elif kind == "arrive":
                satisfy(*p, t)
            elif kind == "finish":
                e, name, k, i = p
                a = by_name[name]
                busy[e] = False
                for j, d in a.succs[i]:
                    at(t + d, "arrive", (name, k, j))
                if on[(name, e)][-1] == i:
                    done_frame[(name, e)] = k
                    if (name, k + 1, on[(name, e)][0]) in waiting:
                        satisfy(name, k + 1, on[(name, e)][0], t)
                left[(name, k)] -= 1
                if left[(name, k)] == 0:
                    worst[name] = max(worst[name], t - release[(name, k)])
        for e, q in queue.items():
            if not busy[e] and q:
                _, k, i, name = heapq.heappop(q)
                busy[e] = True
                at(t + by_name[name].times[i], "finish", (e, name, k, i))
    return worst
