"""Prints, per `kg-bench run` output directory of the population (benches/device/reuse.sh):
statuses, how many traces reused a reference timing, seconds per candidate (first trace's start
to last trace's end over candidates), and, against the first directory, each workload's median
reference latency and the geomean of candidates' speedup ratios.

    python3 reuse_summary.py RUN_DIR [RUN_DIR...]"""

import collections
import datetime
import glob
import json
import math
import statistics
import sys


def load(run):
    traces = []
    for f in sorted(glob.glob(f"{run}/*/*.jsonl")):
        for line in open(f):
            t = json.loads(line)
            if t.get("evaluation"):
                traces.append(t)
    return traces


def ts(t):
    return datetime.datetime.fromisoformat(t["evaluation"]["timestamp"].replace("Z", "+00:00")).timestamp()


def main():
    base = None
    for run in sys.argv[1:]:
        traces = load(run)
        statuses = collections.Counter(t["evaluation"]["status"] for t in traces)
        perf = [t["evaluation"].get("performance") for t in traces]
        reused = [p["reference_reused"] for p in perf if p and p.get("reference_reused")]
        cands = {t["solution"] for t in traces}
        starts = [ts(t) - (t["evaluation"].get("wall_s") or 0) for t in traces]
        span = max(ts(t) for t in traces) - min(starts)
        print(f"{run}: {dict(statuses)}; {len(cands)} candidates, {span / len(cands):.2f} s each "
              f"(first workload start to last end {span:.1f} s)")
        if reused:
            ages = sorted(r["age_s"] for r in reused)
            print(f"  reference timing reused in {len(reused)} traces, age median {statistics.median(ages):.1f} s "
                  f"max {ages[-1]:.1f} s, timed with {len({r['timed_with'] for r in reused})} solutions")
        ref = collections.defaultdict(list)
        speed = {}
        for t, p in zip(traces, perf):
            if p:
                ref[t["workload"]["uuid"]].append(p["reference_latency_ms"])
                speed[(t["solution"], t["workload"]["uuid"])] = p["speedup_factor"]
        med = {u: statistics.median(v) for u, v in ref.items()}
        if base is None:
            base = (med, speed, {(t["solution"], t["workload"]["uuid"]): t["evaluation"]["status"] for t in traces})
            for u, m in med.items():
                print(f"  {u[:8]} reference median {m * 1e3:.2f} us")
            continue
        bmed, bspeed, bstat = base
        same = sum(1 for t in traces if bstat.get((t["solution"], t["workload"]["uuid"])) == t["evaluation"]["status"])
        print(f"  statuses identical to the first run for {same} of {len(traces)} traces")
        for u, m in med.items():
            if u in bmed:
                print(f"  {u[:8]} reference median {m * 1e3:.2f} us, {m / bmed[u]:.3f}x the first run's")
        ratios = [speed[k] / bspeed[k] for k in speed if k in bspeed and bspeed[k] > 0 and speed[k] > 0]
        if ratios:
            g = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            print(f"  speedups against the first run's: geomean {g:.3f} over {len(ratios)} traces")


if __name__ == "__main__":
    main()
