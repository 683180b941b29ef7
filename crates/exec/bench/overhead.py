"""Criterion (c) from a corpus run's traces: the harness's time per workload beyond the timed loops.

Usage: python3 crates/exec/bench/overhead.py TRACES_DIR [--all] [--each]
Reads every trace under TRACES_DIR (kg-bench run's -o directory, or any tree of *.jsonl) and
prints medians over the steady-state workloads (the first workload of each trace file left out:
it carries the candidate's process start and first compiles; --all keeps them) of what the
`harness:` log lines and the timing notes report, in ms, each part over both sides, and how
many are at or under 50 ms, also once the warm-up calls and the correctness rounds' calls
(kernel work the run asked for) are left out too. --each first prints one line per workload:
its problem, its position, the time beyond the timed loops and the phases it is made of.
"""
import glob
import json
import os
import re
import signal
import statistics
import sys

OVERHEAD = re.compile(r"harness: overhead: workload ([\d.]+) ms; timed loops: candidate ([\d.]+) ms, "
                      r"reference ([\d.]+) ms; beyond the timed loops ([\d.-]+) ms; beyond the timed calls' "
                      r"own time ([\d.-]+) ms")
PHASES = re.compile(r"harness: phases: correctness rounds ([\d.]+) s; timed inputs prepared ([\d.]+) s; "
                    r"candidate load \+ warm-up ([\d.]+) s; timed batch ([\d.]+) s; sampled re-checks ([\d.]+) s; "
                    r"reference timing ([\d.]+) s")
ASKED = re.compile(r"harness: kernel calls asked for: warm-up candidate ([\d.]+) ms, reference ([\d.]+) ms; "
                   r"correctness rounds' calls candidate ([\d.]+) ms, reference ([\d.]+) ms; "
                   r"beyond these and the timed loops ([\d.-]+) ms")
NOTES = re.compile(r"timing notes \((candidate|reference)\): (\{.*\})")
COSTS = re.compile(r"judge prepare ([\d.]+).*candidate run ([\d.]+).*judge check ([\d.]+)")


def rows(path, keep_first):
    out = []
    for f in sorted(glob.glob(os.path.join(path, "**", "*.jsonl"), recursive=True)):
        with open(f) as fh:
            lines = [json.loads(x) for x in fh if x.strip()]
        for i, t in enumerate(lines):
            if i == 0 and not keep_first:
                continue
            ev = t.get("evaluation", {})
            log = ev.get("log", "")
            m = OVERHEAD.search(log)
            if not m:
                continue
            r = {"refused": int("harness: CUPTI timing not used" in log),
                 "problem": os.path.basename(os.path.dirname(f)), "index": i,
                 "beyond_loops": float(m[4]), "beyond_calls": float(m[5]), "workload": float(m[1]),
                 "method": ev.get("performance", {}).get("timing_method"), "status": ev.get("status")}
            p = PHASES.search(log)
            if p:
                r.update({"rounds": float(p[1]) * 1e3, "prepare_timed": float(p[2]) * 1e3,
                          "load_warmup": float(p[3]) * 1e3, "timed_batch": float(p[4]) * 1e3,
                          "rechecks": float(p[5]) * 1e3, "reference_timing": float(p[6]) * 1e3})
            a = ASKED.search(log)
            if a:
                r.update({"warmup_candidate": float(a[1]), "warmup_reference": float(a[2]),
                          "beyond_asked_calls": float(a[5])})
            c = COSTS.search(log)
            if c:
                r.update({"rounds_judge_prepare": float(c[1]), "rounds_candidate_run": float(c[2]),
                          "rounds_judge_check": float(c[3])})
            for side, js in NOTES.findall(log):
                b = json.loads(js).get("bracket_ms", {})
                # Each side's timing phase less its timed loop: warm-up (the reference's),
                # calibration, the profiler's stop and read, round trips.
                phase = {"candidate": "timed_batch", "reference": "reference_timing"}[side]
                if phase in r and "calls" in b:
                    r[phase + "_beyond_loop"] = r[phase] - b["calls"]
                for k in ("cupti_start", "calibration", "cupti_stop", "cupti_decode", "cupti_parse"):
                    if b.get(k) is not None:
                        r[k] = r.get(k, 0.0) + b[k]
                if "cupti_fallback" in js:
                    r["fallbacks"] = r.get("fallbacks", 0) + 1
            out.append(r)
    return out


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into head: stop quietly
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args:
        sys.exit(__doc__)
    rs = rows(args[0], "--all" in sys.argv)
    if not rs:
        sys.exit(f"no trace with a `harness: overhead` line under {args[0]}")
    if "--each" in sys.argv:
        for r in rs:
            parts = "  ".join(f"{k} {r[k]:.1f}" for k in ("rounds", "prepare_timed", "load_warmup",
                                                          "timed_batch_beyond_loop", "rechecks",
                                                          "reference_timing_beyond_loop") if k in r)
            asked = f"  beyond asked calls {r['beyond_asked_calls']:7.1f}" if "beyond_asked_calls" in r else ""
            print(f"{r['problem'][:40]:40} {r['index']:2}  beyond loops {r['beyond_loops']:7.1f}{asked}  {parts}")
    keys = [k for k in rs[0] if isinstance(rs[0][k], float)]
    print(f"workloads: {len(rs)}; methods: {sorted({str(r['method']) for r in rs})}; "
          f"statuses: {sorted({str(r['status']) for r in rs})}; "
          f"CUPTI fallbacks (sides): {sum(r.get('fallbacks', 0) for r in rs)}; "
          f"CUPTI spans refused (both sides timed by events): {sum(r['refused'] for r in rs)}; "
          f"beyond the timed loops at or under 50 ms: {sum(r['beyond_loops'] <= 50.0 for r in rs)} of {len(rs)}"
          + (f"; beyond the kernel calls asked for (timed loops, warm-ups, rounds' calls) at or under 50 ms: "
             f"{sum(r['beyond_asked_calls'] <= 50.0 for r in rs)} of {len(rs)}" if all("beyond_asked_calls" in r for r in rs) else ""))
    for k in keys:
        v = sorted(r[k] for r in rs if k in r)
        q = statistics.quantiles(v, n=4) if len(v) >= 2 else [v[0]] * 3
        print(f"{k:>22}: median {statistics.median(v):8.1f}  p25 {q[0]:8.1f}  p75 {q[2]:8.1f}  "
              f"min {v[0]:8.1f}  max {v[-1]:8.1f}")


if __name__ == "__main__":
    main()
