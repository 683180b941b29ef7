"""Summarises kg-bench run directories: status counts, build records, candidate starts, GPUs."""
import glob, json, os, sys

out = {}
for d in sys.argv[1:]:
    rows = []
    for f in sorted(glob.glob(os.path.join(d, "**", "*.jsonl"), recursive=True)):
        for line in open(f):
            t = json.loads(line)
            ev = t.get("evaluation") or {}
            perf = ev.get("performance") or {}
            env = ev.get("environment") or {}
            rows.append({
                "file": os.path.relpath(f, d), "definition": t["definition"], "workload": t["workload"]["uuid"],
                "status": ev.get("status"), "latency_ms": perf.get("latency_ms"),
                "reference_latency_ms": perf.get("reference_latency_ms"), "speedup": perf.get("speedup_factor"),
                "build": ev.get("build"), "candidate_start": ev.get("candidate_start"),
                "gpu": (env.get("gpu_claim") or {}).get("uuid"), "wall_s": ev.get("wall_s"),
                "timestamp": ev.get("timestamp"),
            })
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    builds = [r["build"] for r in rows if r["build"]]
    ready = sorted(r["candidate_start"]["ready_s"] for r in rows if r["candidate_start"])
    gpus = sorted({r["gpu"] for r in rows if r["gpu"]})
    out[d] = {"counts": counts, "rows": rows}
    med = ready[len(ready) // 2] if ready else None
    print(f"{os.path.basename(d)}: {counts} traces={len(rows)} gpus={gpus} ready_s median={med} max={ready[-1] if ready else None}")
    for b in builds:
        print(f"   build cached={b['cached']} build_s={b['build_s']:.1f} waited_s={b['waited_s']:.1f} key={b['key'][:12]}")
    # When each pair's workloads were written, from the run's first: where a lane waited.
    from datetime import datetime
    stamps = {}
    for r in rows:
        if r["timestamp"]:
            t = datetime.fromisoformat(r["timestamp"].rstrip("Z")[:26]).timestamp()
            a, b = stamps.get(r["file"], (t, t))
            stamps[r["file"]] = (min(a, t), max(b, t))
    if stamps:
        t0 = min(a for a, _ in stamps.values())
        for f, (a, b) in sorted(stamps.items(), key=lambda x: x[1][0]):
            print(f"   timeline {a - t0:7.1f} s .. {b - t0:7.1f} s  {f}")
json.dump(out, open(os.environ.get("SUMMARY", "summary.json"), "w"), indent=1)
