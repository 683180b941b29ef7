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
    spans = []  # per candidate: (its first workload's start, its last's end, walls summed)
    for f in sorted(glob.glob(os.path.join(d, "**", "*.jsonl"), recursive=True)):
        traces = [json.loads(l) for l in open(f) if l.strip()]
        for t in traces:
            st = (t.get("evaluation") or {}).get("status")
            counts[st] = counts.get(st, 0) + 1
        if not traces:
            continue
        evs = [t.get("evaluation") or {} for t in traces]
        # A trace is stamped as its workload ends; minus its wall_s, as it began.
        ends = [(datetime.fromisoformat(e["timestamp"].rstrip("Z")[:26]).timestamp(), e.get("wall_s") or 0.0)
                for e in evs if e.get("timestamp")]
        walls.append(sum(e.get("wall_s") or 0.0 for e in evs))
        if ends:
            spans.append((min(t - w for t, w in ends), max(t for t, _ in ends), walls[-1]))
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
        # "between pairs": one candidate's last workload's end to the next one's first workload's
        # start (its solution's import and whatever the lane does between pairs); "outside its
        # workloads": a candidate's first start to last end less its workloads' wall_s.
        between = [spans[i + 1][0] - spans[i][1] for i in range(len(spans) - 1)]
        outside = [b - a - w for a, b, w in spans]
        print(f"  per candidate: workloads' wall_s summed median {med(walls)} s, between pairs median {med(between)} s, "
              f"outside its workloads median {med(outside)} s; first start to last end {round(spans[-1][1] - spans[0][0], 1)} s")
    if pre:
        print(f"  precompiled {len(pre)}: kernels median {med([p['kernels'] for p in pre])}, "
              f"launchers median {med([p['launchers'] for p in pre])}, failed total {sum(p['failed'] for p in pre)}, "
              f"seconds median {med([p['seconds'] for p in pre])}, waited_s median {med([p['waited_s'] for p in pre])} max {round(max(p['waited_s'] for p in pre), 3)}")
    else:
        print("  precompiled: none")
