"""Timing of the judge's and the candidate's calls (embedded in kg-exec): one class per method,
the same code on both sides, and the CUPTI readings of the timed spans (kgcupti).

A timer times a `Calls` (a call over rotating argument sets) and returns (times_ms, notes):
`CpuWallTimer` (perf_counter around each synchronous call; any method on the CPU),
`CudaGraphTimer` (the call captured once in a CUDA graph, replayed) and `EventTimer`
(device_event_sync, and cupti: the same bracket with CUPTI recording every device activity).
`timer_for` picks one by the method name the parent sends.
"""

import statistics
import time

import kg_wire  # noqa: F401  (first: it completes the import path the workers start without)
import kgcupti


def summarize(times_ms):
    s = sorted(times_ms)
    q = statistics.quantiles(s, n=4, method="inclusive") if len(s) >= 2 else [s[0]] * 3
    return {
        "min_ms": s[0],
        "p25_ms": q[0],
        "median_ms": statistics.median(s),
        "p75_ms": q[2],
        "max_ms": s[-1],
        "mean_ms": statistics.fmean(s),
    }


def _sync(dev):
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


class Calls:
    """What a timer times: `call(args)` over the argument sets `sets` in rotation (call i uses set
    i mod n). `after(args, result)`, when given, runs after each timed call, outside the timed
    span (not for cuda_graph): the candidate stashes a copy of its outputs there and drops the
    originals, so its next call reuses that memory just as a reference whose outputs are dropped
    does."""

    def __init__(self, call, sets, after=None):
        self.call = call
        self.sets = sets
        self.after = after
        self.n = len(sets)

    def args(self, i):
        """The argument set of call i (opening a sealed set asks the parent for its key)."""
        return self.sets[i % self.n]

    def index(self, count):
        """Per sample, the index of the argument set its call used: the parent requires one
        sample per timed set whose key it handed out, sets 0..n-1 in order, so samples added
        from inside a call are caught."""
        return [i % self.n for i in range(count)]


def timer_for(method, dev, warmup, iterations, budget_s=None, spin_us=None):
    """The timer of `method` on `dev` (every method times by the wall clock on the CPU).

    `budget_s` (CPU): warm-up stops after a quarter of it, timing after all of it (at least
    three calls). `spin_us` (GPU): the length of the spin kernel queued before each call
    (default SPIN_US_DEFAULT); the parent sizes it from the reference's host launch time."""
    if dev.type == "cpu" or method == "cpu_wall":
        return CpuWallTimer(dev, warmup, iterations, budget_s)
    if method == "cuda_graph":
        return CudaGraphTimer(dev, warmup, iterations)
    if method in ("device_event_sync", "cupti"):
        return EventTimer(dev, warmup, iterations, spin_us, cupti=method == "cupti")
    raise ValueError(f"unknown timing method `{method}`")


def time_calls(calls, timer):
    """`timer.run(calls)` with Python's cyclic garbage collector off (as timeit does), on both
    sides alike: a collection set off by the harness's own allocations between calls could
    otherwise land inside a call's host launch and make it late for its spin.
    Returns (times_ms list, notes dict); notes["timed_index"] always names each sample's set."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        return timer.run(calls)
    finally:
        if was:
            gc.enable()


class CpuWallTimer:
    """cpu_wall: perf_counter around each synchronous call."""

    def __init__(self, dev, warmup, iterations, budget_s=None):
        self.dev = dev
        self.warmup = warmup
        self.iterations = iterations
        self.budget_s = budget_s

    def run(self, calls):
        budget_s = self.budget_s
        t_start = time.perf_counter()
        for i in range(self.warmup):
            calls.call(calls.args(i))
            if budget_s is not None and time.perf_counter() - t_start > budget_s / 4:
                break
        times = []
        t_start = time.perf_counter()
        for i in range(self.iterations):
            args = calls.args(i)
            t0 = time.perf_counter()
            r = calls.call(args)
            _sync(self.dev)
            times.append((time.perf_counter() - t0) * 1e3)
            if calls.after is not None:
                calls.after(args, r)
            del r
            if budget_s is not None and len(times) >= 3 and time.perf_counter() - t_start > budget_s:
                break
        return times, {"timed_index": calls.index(len(times))}


class CudaGraphTimer:
    """cuda_graph: the call on set 0 captured once in a CUDA graph (GRAPH_UNROLL launches),
    replayed; per-launch time. No L2 flush: for launch-bound kernels only. Every sample names
    set 0."""

    GRAPH_UNROLL = 10

    def __init__(self, dev, warmup, iterations):
        self.dev = dev
        self.warmup = warmup
        self.iterations = iterations

    def run(self, calls):
        import torch

        unroll = self.GRAPH_UNROLL
        args = calls.args(0)
        with torch.cuda.device(self.dev):
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(max(self.warmup, 1)):
                    calls.call(args)
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(unroll):
                    calls.call(args)
            torch.cuda.synchronize()
            g.replay()
            torch.cuda.synchronize()
            times = []
            for _ in range(self.iterations):
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) / unroll)
        return times, {"graph_unroll": unroll, "timed_index": [0] * len(times)}


class EventTimer:
    """device_event_sync: per iteration an L2 flush (a read, leaving L2 clean), a device-wide
    sync, a short spin kernel (so the start event and the call are queued before the GPU reaches
    them), a start event, a one-cycle start marker, the call, a device-wide sync (so work on any
    stream is finished), an end event. The fixed cost of the bracket (same sequence, the call
    replaced by host busy time as long as the calls' median host time, capped below the spin) is
    measured the same way and subtracted.

    cupti (`cupti=True`): the same, with CUPTI recording every device activity (kgcupti);
    notes["cupti_ms"] gets each call's device span (cupti_spans), or notes["cupti_fallback"]
    says why not. The returned times are the event times either way."""

    def __init__(self, dev, warmup, iterations, spin_us=None, cupti=False):
        import torch

        self.dev = dev
        self.warmup = warmup
        self.iterations = iterations
        self.cupti = cupti
        # A short spin kernel queued before the start event keeps the GPU busy while the host
        # records the start event and launches the call, so host launch latency is not counted
        # (nvbench's blocking-kernel idea). Its length is `spin_us`.
        self.spin = getattr(torch.cuda, "_sleep", None)
        self.spin_us = float(spin_us) if spin_us else SPIN_US_DEFAULT
        self.flush = None
        # Host time per part of the bracket (ms): where a workload's timing time goes.
        self.cost = {"pre": [], "post": []}

    def run(self, calls):
        import torch

        with torch.cuda.device(self.dev):
            self.flush = torch.zeros(flush_bytes(self.dev) // 4, dtype=torch.int32, device=self.dev)
            try:
                return self._run(calls)
            finally:
                self.flush = None

    def _run(self, calls):
        import torch

        for i in range(self.warmup):
            calls.call(calls.args(i))
        torch.cuda.synchronize()
        notes = {"launch_gap_hidden": self.spin is not None, "spin_us": self.spin_us}
        post = (lambda i, r: calls.after(calls.args(i), r)) if calls.after is not None else None
        recording = False
        t0 = time.perf_counter()
        if self.cupti:
            why = _cupti_start()
            if why:
                notes["cupti_fallback"] = why
            recording = why is None
        t1 = time.perf_counter()
        # The bracket's own cost (subtracted from the event times) is measured after the timed
        # calls, under the same recording (CUPTI's callbacks lengthen every launch, record and
        # sync), by brackets whose "call" keeps the host busy as long as the timed calls' median
        # host time (never longer than most of the spin), so the host reaches the closing sync
        # at the same point of the spin as in a timed call. (On an H200 this did not remove the
        # 5-50 us by which the brackets of us kernels exceed their spans: that lies in the
        # closing sync, hence the stream events below.) Their spins come last in the records
        # (left out when the records are split, below).
        host = []
        try:
            raw, raw_stream = self._bracket(lambda i: calls.call(calls.args(i)), self.iterations, post,
                                            mark=recording and self.spin is not None, pre=calls.args, host=host)
            t3 = time.perf_counter()
            overhead, empty_stream = self._calibrate(host)
        finally:
            t4 = time.perf_counter()
            events, lost = _cupti_stop() if recording else (None, None)
        notes["bracket_overhead_ms"] = overhead
        notes["raw_median_ms"] = statistics.median(raw)
        # The current stream's share of the bracket, without the closing sync and its wake-up
        # (on an H200 the bracket times of us kernels ran 5-50 us over their CUPTI spans, more
        # with more kernels, so they could not check those spans): what engine.rs checks the
        # spans against.
        notes["stream_event_median_ms"] = max(statistics.median(raw_stream) - statistics.median(empty_stream), 0.0)
        # Host time per call against the spin that should hide it: when the host takes longer,
        # the CUPTI span counts the wait (bimodal small-kernel timings).
        notes["host_call_ms"] = {"median": statistics.median(host), "max": max(host)}
        t5 = time.perf_counter()
        if lost:
            notes["cupti_fallback"] = lost
        elif events is not None:
            self._read_cupti(events, len(raw), notes)
        med = lambda v: round(statistics.median(v), 4) if v else None  # noqa: E731
        notes["bracket_ms"] = {"cupti_start": round((t1 - t0) * 1e3, 3), "calls": round((t3 - t1) * 1e3, 3),
                               "calibration": round((t4 - t3) * 1e3, 3), "cupti_stop": round((t5 - t4) * 1e3, 3),
                               "cupti_decode": round(kgcupti.RECORDER.last_decode_ms, 3) if recording else None,
                               "cupti_parse": round((time.perf_counter() - t5) * 1e3, 3),
                               "pre_median": med(self.cost["pre"]), "post_median": med(self.cost["post"])}
        notes["timed_index"] = calls.index(len(raw))
        return [max(t - overhead, 0.0) for t in raw], notes

    def _calibrate(self, host):
        """(the bracket's own cost in ms, its stream times): CALIBRATION_BRACKETS brackets whose
        "call" keeps the host busy for the timed calls' median host time `host`."""
        busy_s = min(statistics.median(host), CALIBRATION_SPIN_SHARE * self.spin_us / 1e3) / 1e3
        # What is measured starts as the spin ends, so the calibration's spin need only outlast
        # its host busy time (no flush either: it comes before the first sync); a 600 us spin
        # for host-bound references made the calibration a fifth of the workload's harness time
        # (H200).
        cal_us = min(self.spin_us, busy_s * 1e6 + CALIBRATION_SPIN_MARGIN_US)
        empty, empty_stream = self._bracket(lambda i: _busy_wait(busy_s), CALIBRATION_BRACKETS,
                                            cycles=int(cal_us * SPIN_CYCLES_PER_US), flushed=False)
        return statistics.median(empty), empty_stream

    def _read_cupti(self, events, count, notes):
        """The timed calls' CUPTI spans and kernels into `notes`, or why they cannot be read."""
        late = []
        # One pass over the records for both readings (thousands of records a workload).
        parsed = _activities_and_spins(events, trailing=CALIBRATION_BRACKETS * SPINS_PER_CALIBRATION)
        spans, why = cupti_spans(events, count, self.spin is not None, late, parsed=parsed)
        if spans is None:
            notes["cupti_fallback"] = why
            return
        notes["cupti_ms"] = spans
        notes["cupti_kernels"] = cupti_call_kernels(events, parsed=parsed)
        # Calls whose first kernel started after the spin had ended: the host took longer than
        # the spin to launch it, and the wait counts in the span.
        notes["late_first_start_calls"] = late[0] if late else 0

    def _bracket(self, fn, count, post=None, mark=False, pre=None, host=None, cycles=None, flushed=True):
        """Runs `fn(i)` for i < count, each in a bracket. `host`, when given, gets each call's host
        time until it returns (its launch time). Returns (bracket times, stream times): the
        latter end at an event recorded on the current stream as the call returns, with no host
        sync in between."""
        import torch

        spin = self.spin
        cycles = int(self.spin_us * SPIN_CYCLES_PER_US) if cycles is None else cycles
        paused = False
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        mids = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
        for i in range(count):
            if pre is not None:
                p0 = time.perf_counter()
                pre(i)  # e.g. decrypting call i's inputs: before the flush, never timed
                self.cost["pre"].append((time.perf_counter() - p0) * 1e3)
            if flushed:
                # Read, not written: a flush that writes leaves L2 full of dirty lines, and the
                # call pays for writing them back as it evicts them (on an H200 a 1M add read
                # 4.9 us with 4.3 MB of such write-backs, 4.1 us after a read flush; ncu's own
                # flush leaves L2 clean). The previous call's outputs are written back here,
                # outside the timing.
                self.flush.sum()
            torch.cuda.synchronize()
            if spin is not None:
                if paused:
                    kgcupti.RECORDER.resume()
                spin(cycles)
            starts[i].record()
            if spin is not None:
                # The start marker: a CUPTI span begins as it ends, so the call's first kernel
                # pays the GPU front-end's launch gap as each later kernel of a call does (~1 us
                # on an H200, what ncu's gpu__time_duration counts too), and not the start
                # event's ~1.4 us, which lies before it.
                spin(1)
            h0 = time.perf_counter()
            r = fn(i)
            if host is not None:
                host.append((time.perf_counter() - h0) * 1e3)
            mids[i].record()
            torch.cuda.synchronize()
            ends[i].record()
            if mark:
                spin(1)  # closes this call's CUPTI records before our own copies in `post`
                # Off until the next call's spin: the stash copy, the next set's draw and the
                # flush make no records (a third of them, for a one-kernel call).
                kgcupti.RECORDER.pause()
                paused = True
            if post is not None:
                p0 = time.perf_counter()
                post(i, r)
                self.cost["post"].append((time.perf_counter() - p0) * 1e3)
            del r
        if paused:
            kgcupti.RECORDER.resume()  # the calibration brackets run under the same recording
        torch.cuda.synchronize()
        return ([s.elapsed_time(e) for s, e in zip(starts, ends)],
                [s.elapsed_time(m) for s, m in zip(starts, mids)])


def flush_bytes(dev):
    """The size of the buffer read before each timed call to flush L2 (at least twice L2)."""
    import torch

    l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
    return max(256 * 1024 * 1024, 2 * l2)


# The spin kernel before each timed call, unless the parent sizes it (time_calls' spin_us):
# longer than the host needs to record the start event and launch a small call.
SPIN_US_DEFAULT = 250.0  # engine.rs SPIN_MIN_US


# torch.cuda._sleep counts clock cycles; ~2 GHz on the GPUs we target (an H200 runs at 1980 MHz).
SPIN_CYCLES_PER_US = 2_000


# Brackets measured to subtract the bracket's own cost from event times (time_calls). Three,
# not five: each costs the reference's host launch again (0.5-0.7 ms for attention references,
# twice per workload), and CUPTI spans, not event times, are what is reported.
CALIBRATION_BRACKETS = 3


# Their host busy time is the timed calls' median host time, at most this share of the spin.
CALIBRATION_SPIN_SHARE = 0.8


# Their spin outlasts that busy time by this much (never longer than the timed calls' spin).
CALIBRATION_SPIN_MARGIN_US = 100.0


def _busy_wait(seconds):
    """Keeps the host busy (not asleep: a sleeping thread wakes late) for `seconds`."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


# A call whose first activity starts more than this long after the start marker ends was not
# queued behind it: host work inside the call kept the GPU idle (counted, and reported as late).
CUPTI_QUEUE_GAP_NS = 5_000


# Spin kernels per timed call under CUPTI (the spin, the start marker, the one-cycle spin that
# closes it) and per calibration bracket (the spin and the start marker).
SPINS_PER_CALL = 3


SPINS_PER_CALIBRATION = 2


def warm_up(fn, dev, count, budget_s=None):
    """Calls `fn()` up to `count` times, synchronising the device after each call; stops after a
    quarter of `budget_s` (the CPU time budget). The candidate's and the reference's warm-up
    both run through here, so they are alike. Returns how long it took, in ms."""
    t0 = time.monotonic()
    for _ in range(count):
        fn()
        _sync(dev)
        if budget_s is not None and time.monotonic() - t0 > budget_s / 4:
            break
    return (time.monotonic() - t0) * 1e3


def cupti_warmup(dev):
    """Starts and stops CUPTI recording once, so its one-time start-up (about a second) never
    falls inside a workload's timing, and checks that the records read back as they should: a
    spin kernel and a device-to-device copy, in launch order, with their names and plausible
    spans. Returns None, or why CUPTI is unusable."""
    import torch

    why = _cupti_start()
    if why:
        return why
    a = torch.zeros(1 << 16, device=dev)
    b = torch.empty_like(a)
    torch.cuda.synchronize()
    torch.cuda._sleep(1000)
    b.copy_(a)
    torch.cuda.synchronize()
    recs, why = _cupti_stop()
    why = why or _records_check(recs)
    if why:
        # Every later start() says so, and the timing falls back to events with this reason.
        kgcupti.RECORDER.error = f"CUPTI unusable: {why}"
    return why


def _records_check(recs):
    """Why the warm-up's records (a spin kernel, then a device-to-device copy) do not read as
    expected, or None: the check that the record layout kgcupti reads matches the library."""
    spins = [r for r in recs if "spin_kernel" in r[3]]
    copies = [r for r in recs if r[3] == "Memcpy DtoD"]
    if not spins or not copies:
        names = sorted({r[3][:60] for r in recs})[:6]
        return f"CUPTI records did not read as a spin kernel and a copy ({len(recs)} records: {names})"
    s, c = spins[-1], copies[-1]
    if not (0 < s[2] - s[1] < 10**9 and 0 <= c[2] - c[1] < 10**9):
        return f"CUPTI records carry implausible spans (spin {s[1]}..{s[2]}, copy {c[1]}..{c[2]})"
    if not s[0] < c[0]:
        return f"CUPTI correlation ids are not in launch order (spin {s[0]}, copy {c[0]})"
    if not s[2] <= c[1]:
        return "CUPTI timestamps are not in launch order (the copy started before the spin ended)"
    return None


def _cupti_start():
    """Starts recording device activities (kgcupti). Returns None, or why it could not start."""
    return kgcupti.RECORDER.start()


def _cupti_stop(keep=True):
    """Stops recording; returns (records, why) as kgcupti.Recorder.stop does."""
    return kgcupti.RECORDER.stop(keep)


def cupti_spans(events, count, spun, late=None, parsed=None):
    """Per timed call, the span of its device activity (kernels, copies, memsets on any stream)
    from CUPTI records: from the end of the start marker (the one-cycle spin launched right
    before the call) to the last end, so the first kernel's launch gap counts as a later
    kernel's does, and so does host work in the call that delays its first kernel.

    Calls are told apart by launch order (correlation ids): each call's activities lie between
    its start marker and the one-cycle spin launched right after its end event. Returns
    (spans_ms, None) or (None, why) when the records cannot be split unambiguously. `late`, when
    a list, gets the number of calls whose first start came later than a queued launch would
    (CUPTI_QUEUE_GAP_NS after the marker). `parsed`, when given, is
    `_activities_and_spins(events, trailing)` already computed (time_calls leaves out the
    calibration brackets' spins, recorded after the timed calls)."""
    if not spun:
        return None, "no spin kernel to delimit calls"
    acts, spins = parsed if parsed is not None else _activities_and_spins(events)
    expected = SPINS_PER_CALL * count
    if len(spins) != expected:
        return None, f"found {len(spins)} spin kernels in the CUPTI records, {expected} expected for {count} timed calls"
    spans = []
    n_late = 0
    for j in range(count):
        k, stop = spins[SPINS_PER_CALL * j + 1], spins[SPINS_PER_CALL * j + 2]
        mine = acts[k + 1: stop]
        if not mine:
            return None, f"timed call {j} has no device activity in the CUPTI records"
        start = acts[k][2]
        first = min(a[1] for a in mine)
        last = max(a[2] for a in mine)
        n_late += first - start > CUPTI_QUEUE_GAP_NS
        spans.append(max(last - start, 0) / 1e6)
    if late is not None:
        late.append(n_late)
    return spans, None


def _activities_and_spins(events, trailing=0):
    """Device activities (kgcupti's (correlation id, start ns, end ns, name) records) in launch
    order, and the positions of our spin kernels among them but the last `trailing` (the
    calibration brackets' spins, recorded after the timed calls): timed call j lies between
    spins 3j+1 (its start marker) and 3j+2."""
    acts = sorted(events)
    spins = [k for k, a in enumerate(acts) if "spin_kernel" in a[3]]
    return acts, spins[:max(len(spins) - trailing, 0)]


def cupti_call_kernels(events, limit=8, parsed=None):
    """Distinct names of the device activities inside the timed calls (split as cupti_spans
    splits them), with their counts, most frequent first: which kernels the candidate really
    ran (a per-process kernel choice shows up here). At most `limit` names; `parsed` as in
    cupti_spans."""
    acts, spins = parsed if parsed is not None else _activities_and_spins(events)
    counts = {}
    for k, stop in zip(spins[1::SPINS_PER_CALL], spins[2::SPINS_PER_CALL]):
        for a in acts[k + 1: stop]:
            counts[a[3]] = counts.get(a[3], 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return {name[:160]: n for name, n in top}
