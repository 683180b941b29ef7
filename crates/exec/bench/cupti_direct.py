"""Kineto against kgcupti, side by side (issue 4, criterion (c)).

Run on a GPU: python3 crates/exec/bench/cupti_direct.py > cupti_direct.jsonl
Each recorder runs in a process of its own (both register CUPTI's buffer callbacks, one set per
process), alternating, `REPEATS` times. In each, the same harness-shaped brackets (flush, sync,
spin, the call, sync, one-cycle spin, a copy of the output) around two calls: a 1M-element add
(one kernel) and a small SDPA (several kernels, host-bound to launch). Per bracket set, on the
host: start, the brackets, stop, read; the call's host launch time; the records; and each call's
span from the records. Then kg_timing.time_calls itself (default cupti) on the add, as the
harness runs it. Last, the record offsets kgcupti reads, checked against the installed
cupti_activity.h with a C compiler where one and the header are present.
"""
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "py"))
REPEATS = 3
CALLS = 60


def kineto():
    from torch._C._autograd import DeviceType, _disable_profiler, _enable_profiler, _prepare_profiler
    from torch._C._profiler import ProfilerActivity, ProfilerConfig, ProfilerState, _ExperimentalConfig

    acts = {ProfilerActivity.CUDA}

    def start():
        cfg = ProfilerConfig(ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig())
        _prepare_profiler(cfg, acts)
        _enable_profiler(cfg, acts)

    def stop():
        return _disable_profiler()

    def read(res):
        return sorted((int(e.correlation_id()), int(e.start_ns()), int(e.end_ns()), e.name())
                      for e in res.events() if e.device_type() == DeviceType.CUDA and not e.is_user_annotation())

    return start, stop, read


def direct():
    import kgcupti

    r = kgcupti.RECORDER

    def start():
        why = r.start()
        if why:
            raise RuntimeError(why)

    def stop():
        return r.stop()

    def read(res):
        recs, why = res
        if why:
            raise RuntimeError(why)
        return sorted(recs)

    return start, stop, read


def brackets(fn, flush, out):
    import torch

    host = []
    for _ in range(CALLS):
        flush.zero_()
        torch.cuda.synchronize()
        torch.cuda._sleep(600_000)  # 300 us at ~2 GHz: longer than any launch here
        h0 = time.perf_counter()
        r = fn()
        host.append((time.perf_counter() - h0) * 1e3)
        torch.cuda.synchronize()
        torch.cuda._sleep(1)
        out.copy_(r)
        del r
    torch.cuda.synchronize()
    return host


def spans(acts):
    spin = [k for k, a in enumerate(acts) if "spin_kernel" in a[3]]
    out = []
    for k, stop in zip(spin[0::2], spin[1::2]):
        mine = acts[k + 1: stop]
        if mine:
            out.append((max(a[2] for a in mine) - min(a[1] for a in mine)) / 1e3)
    return out, len(spin)


def child(mode):
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    start, stop, read = (kineto if mode == "kineto" else direct)()
    x = torch.randn(1 << 20, device=dev)
    y = torch.randn(1 << 20, device=dev)
    q = torch.randn(1, 8, 256, 64, device=dev, dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    flush = torch.empty(256 << 18, dtype=torch.int32, device=dev)
    calls = {"add_1m": (lambda: torch.add(x, y), torch.empty_like(x)),
             "sdpa_small": (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), torch.empty_like(q))}
    t0 = time.perf_counter()
    start()
    torch.zeros(1, device=dev).add_(1)
    torch.cuda.synchronize()
    read(stop())
    first = (time.perf_counter() - t0) * 1e3
    for name, (fn, out) in calls.items():
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start()
        t1 = time.perf_counter()
        host = brackets(fn, flush, out)
        t2 = time.perf_counter()
        res = stop()
        t3 = time.perf_counter()
        acts = read(res)
        t4 = time.perf_counter()
        sp, nspin = spans(acts)
        ms = lambda a, b: round((b - a) * 1e3, 3)  # noqa: E731
        print(json.dumps({"mode": mode, "call": name, "first_start_stop_ms": round(first, 1), "start_ms": ms(t0, t1),
                          "brackets_ms": ms(t1, t2), "stop_ms": ms(t2, t3), "read_ms": ms(t3, t4),
                          "records": len(acts), "spins": nspin, "calls_split": len(sp),
                          "host_launch_ms_median": round(statistics.median(host), 4),
                          "span_us_median": round(statistics.median(sp), 3) if sp else None,
                          "span_us_min": round(min(sp), 3) if sp else None,
                          "names": sorted({a[3][:70] for a in acts})[:8]}), flush=True)
    if mode == "direct":
        # Recording paused around the harness's own work (drawing a set before the flush, the
        # output copy after the call): what a pause costs on the host, and the records saved.
        import kgcupti

        lib = kgcupti.RECORDER.lib
        fn, out = calls["add_1m"]
        for pause in (False, True):
            toggle = []
            start()
            t1 = time.perf_counter()
            for _ in range(CALLS):
                a = torch.randn(1 << 20, device=dev)  # the set's draw
                b = torch.randn(1 << 20, device=dev).to(torch.bfloat16).float()
                flush.zero_()
                torch.cuda.synchronize()
                if pause:
                    p0 = time.perf_counter()
                    for kind in kgcupti.KINDS:
                        lib.cuptiActivityEnable(kind)
                    toggle.append((time.perf_counter() - p0) * 1e3)
                torch.cuda._sleep(600_000)
                r = torch.add(a, b)
                torch.cuda.synchronize()
                torch.cuda._sleep(1)
                if pause:  # off from the closing spin to the next call's spin
                    p0 = time.perf_counter()
                    for kind in kgcupti.KINDS:
                        lib.cuptiActivityDisable(kind)
                    toggle.append((time.perf_counter() - p0) * 1e3)
                out.copy_(r)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            acts = read(stop())
            t3 = time.perf_counter()
            sp, nspin = spans(acts)
            print(json.dumps({"mode": "direct", "pause": pause, "brackets_ms": round((t2 - t1) * 1e3, 3),
                              "stop_read_ms": round((t3 - t2) * 1e3, 3), "records": len(acts), "spins": nspin,
                              "calls_split": len(sp), "toggle_ms_median": round(statistics.median(toggle), 4) if toggle else None,
                              "span_us_median": round(statistics.median(sp), 3) if sp else None}), flush=True)
        import kg_wire
        import kg_timing

        print(json.dumps({"mode": "direct", "check": kg_timing.cupti_warmup(dev), "library": kg_timing.kgcupti.RECORDER.path}),
              flush=True)
        sets = [[torch.randn(1 << 20, device=dev), torch.randn(1 << 20, device=dev)] for _ in range(4)]
        for rep in range(3):
            times, notes = kg_timing.time_calls(kg_timing.Calls(lambda a: torch.add(a[0], a[1]), sets),
                                                kg_timing.timer_for("cupti", dev, 10, 50, spin_us=150))
            print(json.dumps({"mode": "direct", "time_calls": rep, "event_median_ms": statistics.median(times),
                              "cupti_median_ms": statistics.median(notes["cupti_ms"]) if "cupti_ms" in notes else None,
                              "fallback": notes.get("cupti_fallback"), "kernels": notes.get("cupti_kernels"),
                              "late": notes.get("late_first_start_calls"), "bracket_ms": notes["bracket_ms"],
                              "stream_event_median_ms": notes["stream_event_median_ms"]}), flush=True)


def offsets():
    """offsetof() of the fields kgcupti reads, from the installed header, against kgcupti's."""
    import kgcupti

    heads = []
    try:
        import torch

        site = os.path.dirname(os.path.dirname(torch.__file__))
        heads += glob.glob(os.path.join(site, "nvidia", "*", "include", "cupti_activity.h"))
    except Exception:
        pass
    heads += glob.glob("/usr/local/cuda*/extras/CUPTI/include/cupti_activity.h")
    heads += glob.glob("/usr/local/cuda*/include/cupti_activity.h")
    cc = shutil.which("gcc") or shutil.which("cc")
    if not heads or not cc:
        return {"offsets": None, "why": f"header {heads[:1]}, compiler {cc}"}
    out = []
    for h in heads[:3]:
        inc = os.path.dirname(h)
        text = open(h).read()
        deprecated = os.path.join(inc, "cupti_activity_deprecated.h")
        if os.path.exists(deprecated):
            text += open(deprecated).read()
        latest = {}
        for base in ("Kernel", "Memcpy", "Memset"):
            vers = [int(v) for v in re.findall(rf"\}}\s*CUpti_Activity{base}(\d+)\s*;", text)]
            latest[base] = [f"CUpti_Activity{base}{v}" for v in sorted(set(vers))]
        cuda_inc = [d for d in glob.glob("/usr/local/cuda*/include") if os.path.exists(os.path.join(d, "cuda.h"))]
        cuda_inc += glob.glob(os.path.join(os.path.dirname(inc), "..", "cuda_runtime", "include"))
        lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <cupti_activity.h>", "int main(void){"]
        for t in latest["Kernel"]:
            lines.append(f'printf("{t} %zu %zu %zu %zu %zu\\n", offsetof({t},kind), offsetof({t},start), '
                         f'offsetof({t},end), offsetof({t},correlationId), offsetof({t},name));')
        for t in latest["Memcpy"] + latest["Memset"]:
            lines.append(f'printf("{t} %zu %zu %zu %zu\\n", offsetof({t},kind), offsetof({t},start), '
                         f'offsetof({t},end), offsetof({t},correlationId));')
        lines.append("return 0;}")
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "o.c")
            open(src, "w").write("\n".join(lines))
            args = [cc, src, "-o", os.path.join(d, "o"), f"-I{inc}"] + [f"-I{i}" for i in cuda_inc]
            p = subprocess.run(args, capture_output=True, text=True)
            if p.returncode != 0:
                out.append({"header": h, "compile_error": p.stderr[-800:]})
                continue
            q = subprocess.run([os.path.join(d, "o")], capture_output=True, text=True)
            got = {}
            for line in q.stdout.split("\n"):
                if line.strip():
                    name, *vals = line.split()
                    got[name] = [int(v) for v in vals]
            want_k = [kgcupti.OFF_KIND, kgcupti.OFF_START, kgcupti.OFF_END, kgcupti.OFF_KERNEL_CORRELATION,
                      kgcupti.OFF_KERNEL_NAME]
            want_c = [kgcupti.OFF_KIND, kgcupti.OFF_START, kgcupti.OFF_END, kgcupti.OFF_COPY_CORRELATION]
            bad = {n: v for n, v in got.items() if v != (want_k if "Kernel" in n else want_c)}
            out.append({"header": h, "structs": len(got), "mismatched": bad, "offsets": got})
    return {"offsets": out}


def main():
    if len(sys.argv) > 1:
        child(sys.argv[1])
        return
    print(json.dumps(offsets()), flush=True)
    for rep in range(REPEATS):
        for mode in ("kineto", "direct"):
            p = subprocess.run([sys.executable, __file__, mode], capture_output=True, text=True, timeout=120)
            sys.stdout.write(p.stdout)
            if p.returncode != 0:
                print(json.dumps({"mode": mode, "repeat": rep, "rc": p.returncode, "stderr": p.stderr[-1500:]}))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
