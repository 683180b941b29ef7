"""Device diagnostic for the 4096^3 bf16 matmul's per-process bimodality (docs/evidence/evaluate.md).

Run once per process (`python3 matmul_modes.py TAG`); each process times the same matmul, with
the harness's bracket (L2 flush, sync, spin kernel, start event, call, sync, end event), on
input sets held in four ways, and prints one JSON line:
  same   one input set, allocated once, every call
  rot8   eight input sets, allocated once each, in rotation
  fresh  a new set drawn before each call (the allocator hands back the freed block): the
         harness's seed-drawn timed sets
  b2b    back-to-back calls on one set, no flush (per-call mean of one event pair)
  fresh_gap2ms    fresh, with 2 ms of host work before each call (the GPU idles meanwhile)
  kg_cupti(_gap2ms)  the harness's own bracket (kg_timing.time_calls, CUPTI spans, stash copies)
If every mode of a process is slow together, the cause is per process (kernel choice, context);
if `same`/`fresh` are bimodal and `rot8` is not, it is where the inputs were placed.
"""

import json
import statistics
import sys
import time

import torch

TAG = sys.argv[1] if len(sys.argv) > 1 else "0"
CALLS = 40
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
M = N = K = 4096
flush = torch.empty((256 << 20) // 4, dtype=torch.int32, device=dev)


def draw(seed):
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    a = torch.randn((M, K), dtype=torch.float32, device=dev, generator=g).to(torch.bfloat16)
    b = torch.randn((K, N), dtype=torch.float32, device=dev, generator=g).to(torch.bfloat16)
    return a, b


c = torch.empty((M, N), dtype=torch.bfloat16, device=dev)


def bracket(get_set):
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(CALLS)]
    ptrs = set()
    for i in range(CALLS):
        a, b = get_set(i)
        ptrs.add(a.data_ptr())
        flush.zero_()
        torch.cuda.synchronize()
        torch.cuda._sleep(100_000)
        starts[i].record()
        torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        ends[i].record()
        del a, b
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
    return {"median_us": round(statistics.median(t), 1), "min_us": round(t[0], 1),
            "max_us": round(t[-1], 1), "distinct_a_ptrs": len(ptrs)}


def clocks():
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {"sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "throttle": hex(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)),
                "power_w": round(pynvml.nvmlDeviceGetPowerUsage(h) / 1000)}
    except Exception as e:  # diagnostic only
        return {"error": str(e)}


one = draw(1)
for _ in range(10):
    torch.matmul(one[0], one[1], out=c)
torch.cuda.synchronize()
res = {"tag": TAG, "t": time.strftime("%H:%M:%S")}
res["same"] = bracket(lambda i: one)
res["clk_after_same"] = clocks()
sets = [draw(100 + j) for j in range(8)]
res["rot8"] = bracket(lambda i: sets[i % 8])
del sets
res["fresh"] = bracket(lambda i: draw(1000 + i))
res["clk_after_fresh"] = clocks()


def busy(ms):
    t = time.perf_counter()
    while time.perf_counter() - t < ms / 1e3:
        pass


# The host work the harness does between two timed calls (key aside, checks, stash copy) leaves
# the GPU idle for 1-2 ms; `gap` adds that idle time to the bare bracket.
res["fresh_gap2ms"] = bracket(lambda i: (busy(2.0), draw(2000 + i))[1])
# The harness's own bracket (kg_timing.time_calls, CUPTI spans) with stash copies, no gap and gap.
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "py"))
import kg_wire  # noqa: E402
import kg_timing  # noqa: E402


class Drawn:
    def __init__(self, base, gap_ms):
        self.base, self.gap_ms, self.last = base, gap_ms, None

    def __len__(self):
        return CALLS

    def __getitem__(self, i):
        # time_calls reads set i before its flush and again for the call (as SealedSets, drawn once)
        if self.last is None or self.last[1] != i:
            self.last = None
            if self.gap_ms:
                busy(self.gap_ms)
            self.last = (draw(self.base + i), i)
        return self.last


stash = [torch.empty_like(c) for _ in range(CALLS)]
kg_timing.cupti_warmup(dev)
for name, gap in (("kg_cupti", 0.0), ("kg_cupti_gap2ms", 2.0)):
    def call(a):
        torch.matmul(a[0][0], a[0][1], out=c)
        return c

    times, notes = kg_timing.time_calls(kg_timing.Calls(call, Drawn(3000 if gap else 4000, gap),
                                                        lambda a, r: stash[a[1]].copy_(r)),
                                        kg_timing.timer_for("cupti", dev, 0, CALLS))
    sp = sorted(x * 1e3 for x in notes.get("cupti_ms", []))
    res[name] = {"cupti_median_us": round(statistics.median(sp), 1) if sp else notes.get("cupti_fallback"),
                 "cupti_min_us": round(sp[0], 1) if sp else None,
                 "event_median_us": round(statistics.median(times) * 1e3, 1)}
res["clk_end"] = clocks()
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
e0.record()
for _ in range(CALLS):
    torch.matmul(one[0], one[1], out=c)
e1.record()
e1.synchronize()
res["b2b_us"] = round(e0.elapsed_time(e1) * 1e3 / CALLS, 1)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    torch.matmul(one[0], one[1], out=c)
    torch.cuda.synchronize()
res["kernels"] = sorted({e.name[:90] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
print(json.dumps(res), flush=True)
