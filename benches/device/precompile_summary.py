"""Summarises kg-bench run directories for the precompiler: statuses, each candidate's
`candidate_start.precompiled`, and its first workload's wall and phases (where a first call's
compile lands: `candidate_load_warmup_s`)."""
import glob, json, os, statistics, sys
from datetime import datetime


def med(xs):
    return round(statistics.median(xs), 3) if xs else None


for d in sys.argv[1:]:
    counts, pre, first_wall, first_warm, ready, load = {}, [], [], [], [], []
    walls = []  # the workloads' wall_s summed, per candidate
    spans = []  # (first trace's timestamp, last trace's) per candidate, in run order
    for f in sorted(glob.glob(os.path.join(d, "**", "*.jsonl"), recursive=True)):
        traces = [json.loads(l) for l in open(f) if l.strip()]
        for t in traces:
            st = (t.get("evaluation") or {}).get("status")
            counts[st] = counts.get(st, 0) + 1
        if not traces:
            continue
        ts = [datetime.fromisoformat(e["timestamp"].rstrip("Z")[:26]).timestamp()
              for e in ((t.get("evaluation") or {}) for t in traces) if e.get("timestamp")]
        walls.append(sum((t.get("evaluation") or {}).get("wall_s") or 0.0 for t in traces))
        if ts:
            spans.append((min(ts), max(ts)))
        ev = traces[0].get("evaluation") or {}
        cs = ev.get("candidate_start") or {}
        if cs:
            ready.append(cs["ready_s"])
            load.append(cs["load_s"])
        if cs.get("precompiled"):
            pre.append(cs["precompiled"])
        ph = (ev.get("performance") or {}).get("phases") or {}
        if ph:
            first_wall.append(sum(v for v in ph.values() if isinstance(v, (int, float))))
            first_warm.append(ph.get("candidate_load_warmup_s", 0.0))
    print(f"{os.path.basename(d)}: {counts}")
    print(f"  candidates {len(ready)}: ready_s median {med(ready)}, load_s median {med(load)}")
    print(f"  first workload: phases summed median {med(first_wall)} s, candidate load+warm-up median {med(first_warm)} s")
    spans.sort()
    if len(spans) > 1:
        # Traces are stamped as each workload ends: "within" is workload 1's end to the last's,
        # "between" the last trace of one candidate to the first of the next (its start, its
        # first workload, and whatever the lane does between pairs).
        within = [b - a for a, b in spans]
        between = [spans[i + 1][0] - spans[i][1] for i in range(len(spans) - 1)]
        print(f"  per candidate: within median {med(within)} s, between median {med(between)} s, "
              f"first to last {round(spans[-1][1] - spans[0][0], 1)} s; workloads' wall_s summed median {med(walls)} s")
    if pre:
        print(f"  precompiled {len(pre)}: kernels median {med([p['kernels'] for p in pre])}, "
              f"launchers median {med([p['launchers'] for p in pre])}, failed total {sum(p['failed'] for p in pre)}, "
              f"seconds median {med([p['seconds'] for p in pre])}, waited_s median {med([p['waited_s'] for p in pre])} max {round(max(p['waited_s'] for p in pre), 3)}")
    else:
        print("  precompiled: none")
