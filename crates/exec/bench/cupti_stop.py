"""Where the CUDA activity profiler's per-workload cost goes (issue 4, criterion (c)).

Run on a GPU: python3 crates/exec/bench/cupti_stop.py > cupti_stop.jsonl
For each profiler configuration and record count, starts Kineto's CUPTI recording through the
same low-level bindings kg_timing uses, queues `calls` brackets shaped like the harness's
(flush, spin, a small kernel, one-cycle spin), stops it, and times each step on the host:
prepare, enable, the brackets, disable (flush + Kineto's processing), and turning the result
into a Python list. One JSON line per measurement.

Then (`"config": "harness"` lines) brackets with the harness's work around each call: drawing
the call's inputs before the flush (randn and casts) and copying its output after it, recorded
throughout or with recording toggled off around that work (`_toggle_collection_dynamic`), to
see what the toggles cost, how many records they save, and whether every call's kernel is
still recorded (`calls_seen`).
"""
import json
import time

import torch
from torch._C._autograd import (DeviceType, _disable_profiler, _enable_profiler, _prepare_profiler,
                                _toggle_collection_dynamic)
from torch._C._profiler import ProfilerActivity, ProfilerConfig, ProfilerState, _ExperimentalConfig

ACTS = {ProfilerActivity.CUDA}
CONFIGS = {
    "default": {},
    "no_external_correlation": {"disable_external_correlation": True},
}


def config(extra):
    return ProfilerConfig(ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig(**extra))


def once(extra, calls, x, flush):
    cfg = config(extra)
    t0 = time.perf_counter()
    _prepare_profiler(cfg, ACTS)  # enabling without it segfaults (torch 2.11, H200)
    t1 = time.perf_counter()
    _enable_profiler(cfg, ACTS)
    t2 = time.perf_counter()
    for _ in range(calls):
        flush.zero_()
        torch.cuda.synchronize()
        torch.cuda._sleep(2000)
        x.add_(1)
        torch.cuda.synchronize()
        torch.cuda._sleep(1)
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    res = _disable_profiler()
    t4 = time.perf_counter()
    ev = list(res.events())
    t5 = time.perf_counter()
    dev_acts = [e for e in ev if str(e.device_type()).endswith("CUDA")]
    t6 = time.perf_counter()
    enum_acts = [e for e in ev if e.device_type() == DeviceType.CUDA]  # the harness's filter since session 7
    t7 = time.perf_counter()
    assert len(enum_acts) == len(dev_acts)
    ms = lambda a, b: round((b - a) * 1e3, 3)  # noqa: E731
    return {"prepare_ms": ms(t0, t1), "enable_ms": ms(t1, t2), "calls_ms": ms(t2, t3),
            "disable_ms": ms(t3, t4), "events_ms": ms(t4, t5), "filter_ms": ms(t5, t6),
            "filter_enum_ms": ms(t6, t7), "events": len(ev), "device_events": len(dev_acts)}


def harness(calls, x, flush, toggle):
    cfg = config({})
    _prepare_profiler(cfg, ACTS)
    _enable_profiler(cfg, ACTS)
    out = torch.empty_like(x)
    g = torch.Generator(device=x.device)
    tog = []
    t2 = time.perf_counter()
    for i in range(calls):
        if toggle:
            a = time.perf_counter()
            _toggle_collection_dynamic(False, ACTS)
            tog.append(time.perf_counter() - a)
        g.manual_seed(i)
        ins = [torch.randn(x.shape, generator=g, device=x.device).to(torch.bfloat16) for _ in range(3)]
        flush.zero_()
        torch.cuda.synchronize()
        if toggle:
            a = time.perf_counter()
            _toggle_collection_dynamic(True, ACTS)
            tog.append(time.perf_counter() - a)
        torch.cuda._sleep(2000)
        y = x.add(ins[0].float())
        torch.cuda.synchronize()
        torch.cuda._sleep(1)
        if toggle:
            torch.cuda.synchronize()  # the marker's record is complete before recording stops
        out.copy_(y)
    if toggle:
        _toggle_collection_dynamic(True, ACTS)
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    res = _disable_profiler()
    t4 = time.perf_counter()
    ev = list(res.events())
    dev_acts = sorted((e.correlation_id(), e.name()) for e in ev if e.device_type() == DeviceType.CUDA)
    spins = [k for k, a in enumerate(dev_acts) if "spin_kernel" in a[1]]
    seen = sum(1 for k, stop in zip(spins[0::2], spins[1::2])
               if any("add" in n.lower() or "Functor" in n for _, n in dev_acts[k + 1: stop]))
    ms = lambda a, b: round((b - a) * 1e3, 3)  # noqa: E731
    return {"config": "harness", "toggle": toggle, "calls": calls, "calls_ms": ms(t2, t3),
            "disable_ms": ms(t3, t4), "events": len(ev), "device_events": len(dev_acts),
            "spins": len(spins), "calls_seen": seen,
            "toggle_us_median": round(sorted(tog)[len(tog) // 2] * 1e6, 1) if tog else None}


def main():
    dev = torch.device("cuda:0")
    x = torch.zeros(1 << 20, device=dev)
    flush = torch.empty(256 << 20 >> 2, dtype=torch.int32, device=dev)
    once({}, 1, x, flush)  # one-time CUPTI start-up, as kg_timing.cupti_warmup
    for name, extra in CONFIGS.items():
        for calls in (0, 70, 300):
            for rep in range(4):
                r = once(extra, calls, x, flush)
                r.update(config=name, calls=calls, rep=rep)
                print(json.dumps(r), flush=True)
    for rep in range(3):
        for toggle in (False, True):
            try:
                print(json.dumps(dict(harness(60, x, flush, toggle), rep=rep)), flush=True)
            except Exception as e:  # an unusable toggle is a result too
                print(json.dumps({"config": "harness", "toggle": toggle, "error": f"{type(e).__name__}: {e}"}), flush=True)


if __name__ == "__main__":
    main()
