"""Unit tests of the worker helpers that need no GPU: CUPTI record decoding and splitting, and
output stashes.

CUPTI records are modelled as kgcupti returns them: (correlation id, start ns, end ns, name).
"""

import json
import os
import struct
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kg_wire  # noqa: E402
import kg_env  # noqa: E402
import kg_handover  # noqa: E402
import kg_inputs  # noqa: E402
import kg_timing  # noqa: E402
import kgcupti  # noqa: E402


def Ev(corr, start, end, name):
    """A device activity record as kgcupti returns it."""
    return (corr, start, end, name)


def call_records(corr, t, kernels, flush=True):
    """One timed call as the harness launches it: flush, spin (50 us), the start event (no
    record), the one-cycle start marker, the call's kernels [(offset after the marker's end,
    duration)], the closing one-cycle spin."""
    ev = []
    if flush:
        ev.append(Ev(corr, t, t + 80_000, "reduce_kernel<sum_functor>"))
        corr += 1
        t += 90_000
    spin_end = t + 50_000
    ev.append(Ev(corr, t, spin_end, "spin_kernel"))
    # 2.4 us after the spin: the start event's front-end time lies before the marker
    marker_end = spin_end + 3_500
    ev.append(Ev(corr + 1, spin_end + 2_400, marker_end, "spin_kernel"))
    corr += 2
    last = marker_end
    for off, dur in kernels:
        ev.append(Ev(corr, marker_end + off, marker_end + off + dur, "candidate_kernel"))
        last = max(last, marker_end + off + dur)
        corr += 1
    ev.append(Ev(corr, last + 20_000, last + 21_000, "spin_kernel"))
    # our own output copy after the call, which must not count
    ev.append(Ev(corr + 1, last + 22_000, last + 40_000, "Memcpy DtoD (Device -> Device)"))
    return ev, corr + 2, last + 100_000


def records(calls):
    ev, corr, t = [], 1, 1_000_000
    for kernels in calls:
        e, corr, t = call_records(corr, t, kernels)
        ev += e
    return ev


def test_span_runs_from_the_start_marker_to_the_last_end_across_streams():
    # The first kernel's launch gap after the marker counts (as a second kernel's gap does);
    # the start event's time before the marker does not. Second call: two kernels, the
    # second on a side stream overlapping the first.
    ev = records([[(1_000, 5_000)], [(1_200, 4_000), (3_000, 6_000)]])
    spans, why = kg_timing.cupti_spans(ev, 2, True)
    assert why is None
    assert spans == pytest.approx([0.006, 0.009])


def test_our_copies_after_the_call_are_not_counted():
    ev = records([[(1_000, 5_000)]])
    spans, _ = kg_timing.cupti_spans(ev, 1, True)
    assert spans == pytest.approx([0.006])  # not the trailing memcpy


def test_host_work_that_delays_the_first_kernel_is_counted_from_the_marker_end():
    # the call's first kernel starts 30 us after the marker: host work inside the call
    ev = records([[(30_000, 5_000)]])
    spans, _ = kg_timing.cupti_spans(ev, 1, True)
    assert spans == pytest.approx([0.035])


def test_unsplittable_records_fall_back_with_a_reason():
    ev = records([[(1_000, 5_000)], [(1_000, 5_000)]])
    spans, why = kg_timing.cupti_spans(ev, 3, True)
    assert spans is None and "spin kernels" in why
    # a call with no device activity at all (work done on the host) cannot be timed by CUPTI
    ev = records([[]])
    spans, why = kg_timing.cupti_spans(ev, 1, True)
    assert spans is None and "no device activity" in why
    spans, why = kg_timing.cupti_spans(records([[(1_000, 5_000)]]), 1, False)
    assert spans is None and "spin" in why


def test_a_candidate_spin_kernel_breaks_the_split_rather_than_shortening_it():
    ev = records([[(1_000, 5_000)]])
    ev.append(Ev(5, 0, 1, "spin_kernel"))
    spans, why = kg_timing.cupti_spans(ev, 1, True)
    assert spans is None and "4 spin kernels" in why


def test_call_kernels_names_only_what_ran_inside_the_timed_calls():
    ev = records([[(1_000, 5_000)], [(1_200, 4_000), (3_000, 6_000)]])
    # the flush fills and our trailing copies lie outside the calls and are not named
    assert kg_timing.cupti_call_kernels(ev) == {"candidate_kernel": 3}
    assert kg_timing.cupti_call_kernels(records([[]])) == {}


def test_stash_copies_matching_outputs_and_keeps_mismatches_visible():
    dev = torch.device("cpu")
    bufs = kg_handover.alloc_like_spec([{"shape": [2, 3], "dtype": "float32"}, {"shape": None, "dtype": "int64"}], dev)
    assert [tuple(b.shape) for b in bufs] == [(2, 3), ()]
    out = (torch.arange(6, dtype=torch.float32).view(2, 3), torch.tensor(7))
    got = kg_handover.stash_outputs(out, bufs)
    assert got is bufs and torch.equal(bufs[0], out[0]) and int(bufs[1]) == 7
    wrong_shape = [torch.zeros(3, 2), torch.tensor(7)]
    assert kg_handover.stash_outputs(wrong_shape, bufs) is wrong_shape
    wrong_dtype = [torch.zeros(2, 3, dtype=torch.float64), torch.tensor(7)]
    assert kg_handover.stash_outputs(wrong_dtype, bufs) is wrong_dtype
    assert kg_handover.stash_outputs([out[0]], bufs) == [out[0]]  # wrong count

    class Sub(torch.Tensor):
        pass

    sub = [torch.zeros(2, 3).as_subclass(Sub), torch.tensor(7)]
    assert kg_handover.stash_outputs(sub, bufs) is sub  # a subclass reaches the judge as is


def test_cpu_timing_calls_after_outside_the_timed_span():
    seen = []
    times, _ = kg_timing.time_calls(kg_timing.Calls(lambda a: a * 2, [1, 2, 3], lambda a, r: seen.append((a, r))),
                                    kg_timing.timer_for("cpu_wall", torch.device("cpu"), 0, 3))
    assert len(times) == 3 and seen == [(1, 2), (2, 4), (3, 6)]


def test_cpu_timing_names_the_set_of_each_sample():
    # The parent requires one sample per timed set whose key it handed out, in order.
    times, notes = kg_timing.time_calls(kg_timing.Calls(lambda a: a, [10, 11, 12]),
                                        kg_timing.timer_for("cpu_wall", torch.device("cpu"), 0, 3))
    assert notes["timed_index"] == [0, 1, 2] and len(times) == 3
    # Sets in rotation (the reference on clones): the index wraps as the sets do.
    times, notes = kg_timing.time_calls(kg_timing.Calls(lambda a: a, [10, 11]),
                                        kg_timing.timer_for("cpu_wall", torch.device("cpu"), 1, 5))
    assert notes["timed_index"] == [0, 1, 0, 1, 0] and len(times) == 5


def test_error_replies_are_clipped_to_the_parents_bound():
    r = kg_wire.error_reply("compile", "x" * 100_000, "t" * 100_000)
    assert len(r["message"]) < kg_wire.ERROR_TEXT_LIMIT + 100 and len(r["traceback"]) < kg_wire.ERROR_TEXT_LIMIT + 100
    assert r["message"].startswith("x" * 100) and r["message"].endswith("x" * 100)
    assert "characters dropped" in r["message"]
    short = kg_wire.error_reply("runtime", "boom")
    assert short == {"result": "error", "kind": "runtime", "message": "boom"}


def test_channel_serves_on_an_inherited_descriptor_and_says_ready(monkeypatch):
    import socket

    ours, theirs = socket.socketpair()
    monkeypatch.setattr(sys, "argv", ["worker.py", str(theirs.detach()), str(os.getppid())])
    monkeypatch.setattr(kg_wire, "CHANNEL", [])
    monkeypatch.setattr(kg_wire, "start_parent_watchdog", lambda: None)
    ours.sendall(b'{"op": "echo", "x": 1}\n{"op": "shutdown"}\n')
    kg_wire.serve({"echo": lambda req: {"result": "ok", "x": req["x"]}})
    chan = kg_wire.CHANNEL[0]
    # Nothing a worker starts inherits the channel.
    assert not chan.sock.get_inheritable()
    chan.rfile.close()
    chan.sock.close()
    ours.settimeout(5)
    lines = ours.makefile("rb").read().splitlines()
    assert [json.loads(x) for x in lines] == [{"ready": True}, {"result": "ok", "x": 1}, {"result": "ok"}]


def test_warm_up_runs_count_calls_or_stops_at_a_quarter_of_the_budget():
    import time

    calls = []
    kg_timing.warm_up(lambda: calls.append(1), torch.device("cpu"), 5)
    assert len(calls) == 5
    calls.clear()
    kg_timing.warm_up(lambda: (calls.append(1), time.sleep(0.02)), torch.device("cpu"), 1000, budget_s=0.2)
    assert 2 <= len(calls) <= 5  # stops once 0.05 s (a quarter of the budget) has passed


@pytest.mark.parametrize("t", [
    torch.randn(33, 896).to(torch.bfloat16),
    torch.randn(7, 3, 5),
    torch.randint(-5, 5, (17,), dtype=torch.int64),
    torch.rand(9) > 0.5,
    torch.randn(4, 4).to(torch.float8_e4m3fn),
    torch.tensor(3.5),
    torch.empty(0, 8),
    torch.randn(8, 6).t(),  # not contiguous
])
def test_keystream_xor_seals_and_opens_every_dtype_and_shape(t):
    sealed = kg_inputs.keystream_xor(t, 123456789, 2)
    assert sealed.dtype == t.dtype and sealed.shape == t.shape
    raw = t.contiguous().reshape(-1).view(torch.uint8)
    if raw.numel() >= 8:
        # Sealed bytes differ from the plain ones (a keystream byte is 0 only 1 time in 256).
        assert (sealed.contiguous().reshape(-1).view(torch.uint8) != raw).float().mean() > 0.9
    opened = kg_inputs.keystream_xor(sealed, 123456789, 2)
    assert torch.equal(opened.reshape(-1).view(torch.uint8), raw)
    if raw.numel() >= 8:
        # Another key or another tensor index opens nothing.
        for key, index in ((123456788, 2), (123456789, 3)):
            wrong = kg_inputs.keystream_xor(sealed, key, index)
            assert (wrong.reshape(-1).view(torch.uint8) != raw).float().mean() > 0.9


def test_time_calls_opens_each_set_just_before_its_call_on_the_cpu():
    # A lazy sequence records when each set is opened relative to the calls.
    log = []

    class Sets:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            log.append(("open", i))
            return i

    def call(i):
        log.append(("call", i))

    times, _ = kg_timing.time_calls(kg_timing.Calls(call, Sets()), kg_timing.timer_for("cpu_wall", torch.device("cpu"), 0, 5))
    assert len(times) == 5
    assert log == [x for i in range(5) for x in (("open", i), ("call", i))]


def test_sealed_sets_open_in_order_with_the_parents_keys(monkeypatch):
    plain = [[torch.randn(4, 8), 1e-6], [torch.randn(4, 8), 1e-6]]
    keys = [111, 222]
    sealed = [[kg_inputs.keystream_xor(x, k, j) if isinstance(x, torch.Tensor) else x for j, x in enumerate(ins)]
              for ins, k in zip(plain, keys)]
    asked = []

    class Parent:
        def aside(self, obj):
            asked.append(obj["index"])
            return {"key": str(keys[obj["index"]])}

    monkeypatch.setattr(kg_wire, "CHANNEL", [Parent()])
    s = kg_inputs.SealedSets(sealed, extras=[("out0",), ("out1",)])
    assert len(s) == 2 and asked == []  # nothing opened before it is used
    ins, out, i = s[0]
    assert torch.equal(ins[0], plain[0][0]) and ins[1] == 1e-6 and (out, i) == ("out0", 0)
    s[0]
    assert asked == [0]  # opened once
    assert torch.equal(s[1][0][0], plain[1][0]) and asked == [0, 1]

    class Refusing:
        def aside(self, obj):
            return {"error": "out of turn"}

    monkeypatch.setattr(kg_wire, "CHANNEL", [Refusing()])
    with pytest.raises(RuntimeError, match="out of turn"):
        kg_inputs.SealedSets(sealed)[0]


SPEC = [{"name": "x", "dtype": "bfloat16", "shape": [3, 40]},
        {"name": "norm_weight", "dtype": "float32", "shape": [40]},
        {"name": "ids", "dtype": "int64", "shape": [5]},
        {"name": "scale", "dtype": "float32", "shape": None},
        {"value": 1e-6}]


def test_random_input_sets_are_a_function_of_their_seed():
    dev = torch.device("cpu")
    a, b, c = (kg_inputs.random_input_set(SPEC, s, dev) for s in (7, 7, 8))
    assert [type(v) for v in a] == [torch.Tensor, torch.Tensor, torch.Tensor, float, float]
    assert a[0].dtype == torch.bfloat16 and list(a[0].shape) == [3, 40] and a[4] == 1e-6
    assert (a[1] - 1.0).abs().max() < 0.6  # norm weights near 1
    assert kg_inputs.digest(a) == kg_inputs.digest(b)  # same seed, same bytes: the judge and the candidate agree
    assert all(torch.equal(x, y) for x, y in zip(a[:3], b[:3])) and a[3] == b[3]
    assert kg_inputs.digest(a) != kg_inputs.digest(c) and not torch.equal(a[0], c[0])
    # The global generator does not enter: a solution drawing random numbers changes nothing.
    torch.manual_seed(123)
    torch.randn(100)
    assert kg_inputs.digest(kg_inputs.random_input_set(SPEC, 7, dev)) == kg_inputs.digest(a)


def test_generated_sets_open_in_order_one_at_a_time(monkeypatch):
    asked = []
    seeds = [41, 42, 43]

    class Parent:
        def aside(self, obj):
            asked.append(obj["index"])
            return {"key": str(seeds[obj["index"]])}

    monkeypatch.setattr(kg_wire, "CHANNEL", [Parent()])
    dev = torch.device("cpu")
    s = kg_inputs.SealedSets(None, extras=[("o0",), ("o1",), ("o2",)], generate=(SPEC, dev, 3))
    assert len(s) == 3 and asked == []
    ins, out, i = s[0]
    assert kg_inputs.digest(ins) == kg_inputs.digest(kg_inputs.random_input_set(SPEC, 41, dev)) and (out, i) == ("o0", 0)
    s[0]
    assert asked == [0]  # the open set is kept for its call (pre, call, after)
    assert kg_inputs.digest(s[1][0]) == kg_inputs.digest(kg_inputs.random_input_set(SPEC, 42, dev)) and asked == [0, 1]
    assert 0 not in s._open  # only the current set stays alive


def test_late_first_starts_are_counted():
    ev = records([[(1_000, 5_000)], [(30_000, 5_000)], [(4_000, 1_000)]])
    late = []
    spans, why = kg_timing.cupti_spans(ev, 3, True, late)
    assert why is None and late == [1]
    assert spans == pytest.approx([0.006, 0.035, 0.005])


def test_digest_of_a_large_tensor_samples_it_and_still_tells_generators_apart():
    g = torch.Generator().manual_seed(7)
    a = torch.randn(1 << 20, generator=g)  # 4 MiB: sampled
    assert kg_inputs.digest([a]) == kg_inputs.digest([a.clone()])
    # another draw (a generator that differs changes every byte) is told apart
    b = torch.randn(1 << 20, generator=torch.Generator().manual_seed(8))
    assert kg_inputs.digest([a]) != kg_inputs.digest([b])
    # a change in a sampled chunk, the first or the last byte, is seen
    for i in (0, a.numel() - 1):
        c = a.clone()
        c[i] += 1.0
        assert kg_inputs.digest([c]) != kg_inputs.digest([a]), i
    # so is one at a chunk in the middle of the stride
    stride = (a.numel() * 4 - kg_inputs.DIGEST_CHUNK) // (kg_inputs.DIGEST_CHUNKS - 1)
    c = a.clone()
    c[4096 * stride // 4] += 1.0
    assert kg_inputs.digest([c]) != kg_inputs.digest([a])
    # dtype and shape are part of the digest, small tensors are hashed whole
    assert kg_inputs.digest([a.view(2, -1)]) != kg_inputs.digest([a])
    s = torch.arange(10)
    t = s.clone()
    t[5] = -1
    assert kg_inputs.digest([s]) != kg_inputs.digest([t])
    assert kg_inputs.digest([s, 3]) != kg_inputs.digest([s, 4])


def test_calibration_brackets_recorded_last_are_left_out():
    # two timed calls, then two calibration brackets (spin and start marker, no flush, no
    # closing spin), as time_calls records them: the calibration runs after the calls, under
    # CUPTI too
    ev, corr, t = [], 1, 1_000_000
    for kernels in ([(1_000, 5_000)], [(30_000, 2_000)]):
        e, corr, t = call_records(corr, t, kernels)
        ev += e
    for _ in range(2):
        ev.append(Ev(corr, t + 90_000, t + 140_000, "spin_kernel"))
        ev.append(Ev(corr + 1, t + 142_000, t + 143_000, "spin_kernel"))
        corr, t = corr + 2, t + 200_000
    late = []
    trailing = 2 * kg_timing.SPINS_PER_CALIBRATION
    parsed = kg_timing._activities_and_spins(ev, trailing=trailing)
    spans, why = kg_timing.cupti_spans(ev, 2, True, late, parsed=parsed)
    assert why is None and spans == pytest.approx([0.006, 0.032]) and late == [1]
    assert kg_timing.cupti_call_kernels(ev, parsed=parsed) == {"candidate_kernel": 2}
    # left in, the calibration spins break the split instead of lengthening a call
    spans, why = kg_timing.cupti_spans(ev, 2, True)
    assert spans is None and "found 10 spin kernels" in why and "6 expected" in why
    # a candidate that adds a spin of its own is still caught by the count
    extra = ev + [Ev(corr, t, t + 10, "spin_kernel")]
    spans, why = kg_timing.cupti_spans(extra, 2, True, parsed=kg_timing._activities_and_spins(extra, trailing=trailing))
    assert spans is None and "found 7 spin kernels" in why


def kernel_record(corr, start, end, name_ptr, size=200):
    """Bytes laid out as CUpti_ActivityKernel4 and later (kind, start, end, correlation id,
    name pointer at their offsets), with filler elsewhere."""
    b = bytearray(b"\xa5" * size)
    struct.pack_into("<I", b, 0, kgcupti.KIND_CONCURRENT_KERNEL)
    struct.pack_into("<QQ", b, 16, start, end)
    struct.pack_into("<I", b, 92, corr)
    struct.pack_into("<Q", b, 104, name_ptr)
    return b


def copy_record(kind, corr, start, end, copy_kind=8, size=64):
    b = bytearray(b"\x5a" * size)
    struct.pack_into("<I", b, 0, kind)
    b[4] = copy_kind
    struct.pack_into("<QQ", b, 16, start, end)
    struct.pack_into("<I", b, 44, corr)
    return b


def test_records_decode_at_the_cupti_offsets():
    buf = kernel_record(7, 1_000, 6_000, 0xBEEF) + copy_record(kgcupti.KIND_MEMCPY, 8, 7_000, 9_000) \
        + copy_record(kgcupti.KIND_MEMSET, 9, 9_500, 9_900) + copy_record(22, 10, 1, 2)
    names = {0xBEEF: "void spin_kernel(long)"}
    out = [kgcupti.decode(buf, off, names.__getitem__) for off in (0, 200, 264, 328)]
    assert out == [(7, 1_000, 6_000, "void spin_kernel(long)"), (8, 7_000, 9_000, "Memcpy DtoD"),
                   (9, 9_500, 9_900, "Memset"), None]
    # a copy kind we have no name for keeps its number
    assert kgcupti.decode(copy_record(kgcupti.KIND_MEMCPY, 1, 2, 3, copy_kind=99), 0, None)[3] == "Memcpy 99"


def test_records_are_walked_by_learned_sizes_or_not_at_all():
    k1, c, k2 = kernel_record(7, 1_000, 6_000, 0xBEEF), copy_record(kgcupti.KIND_MEMCPY, 8, 7_000, 9_000), \
        kernel_record(9, 9_500, 9_900, 0xCAFE)
    buf = bytes(k1 + c + k2)
    names = {0xBEEF: "void spin_kernel(long)", 0xCAFE: "add"}
    by_decode = [kgcupti.decode(buf, off, names.__getitem__) for off in (0, 200, 264)]
    sizes = {}
    # as CUPTI's iterator found them: kernel then copy sizes are known, the last record's not
    kgcupti.learn_sizes(sizes, buf, [0, 200, 264])
    assert sizes == {kgcupti.KIND_CONCURRENT_KERNEL: 200, kgcupti.KIND_MEMCPY: 64}
    assert kgcupti.walk(buf, len(buf), sizes, names.__getitem__) == by_decode
    # steps that do not end where the valid bytes do (a size learned wrong, a cut buffer)
    assert kgcupti.walk(buf, len(buf) - 8, sizes, names.__getitem__) is None
    # a buffer that ends inside a record is not read past its end
    assert kgcupti.walk(buf[:100], 100, sizes, names.__getitem__) is None
    assert kgcupti.walk(buf, len(buf), {**sizes, kgcupti.KIND_MEMCPY: 72}, names.__getitem__) is None
    # a kind whose size was never learned
    memset = bytes(copy_record(kgcupti.KIND_MEMSET, 10, 1, 2))
    assert kgcupti.walk(buf + memset, len(buf) + 64, sizes, names.__getitem__) is None
    # a kind seen at two sizes is never walked
    kgcupti.learn_sizes(sizes, buf + bytes(copy_record(kgcupti.KIND_MEMCPY, 11, 1, 2, size=72)) + memset,
                        [0, 200, 264, 464, 536])
    assert sizes[kgcupti.KIND_MEMCPY] == 0
    assert kgcupti.walk(buf, len(buf), sizes, names.__getitem__) is None


def test_records_check_refuses_a_layout_that_reads_wrong():
    good = [(5, 1_000, 2_000_000, "void at::cuda::spin_kernel(long)"), (6, 2_000_100, 2_000_300, "Memcpy DtoD")]
    assert kg_timing._records_check(good) is None
    # names that do not read (a wrong name offset), nothing recorded
    assert "did not read" in kg_timing._records_check([(5, 1, 2, "?"), (6, 3, 4, "Memcpy DtoD")])
    assert "did not read" in kg_timing._records_check([])
    # start and end read from the wrong place
    assert "implausible" in kg_timing._records_check([(5, 2_000, 1_000, good[0][3]), good[1]])
    # correlation ids read from the wrong place: not in launch order
    assert "launch order" in kg_timing._records_check([(9, *good[0][1:]), good[1]])
    assert "copy started before" in kg_timing._records_check([good[0], (6, 1_500, 1_600, "Memcpy DtoD")])


def test_demangler_reads_kernel_names_or_keeps_them():
    d = kgcupti._demangler()
    assert d("_Z11spin_kernell") == "spin_kernel(long)"
    assert d("triton_poi_fused_add_0") == "triton_poi_fused_add_0"
    assert d("_Znot a name") == "_Znot a name"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only behaviour")
def test_recorder_without_a_gpu_reports_why_it_cannot_record():
    r = kgcupti.Recorder()
    recs, why = r.stop()
    assert recs == [] and "not started" in why
    # torch's CUDA wheel brings libcupti, which refuses to record without a device (or, with a
    # CPU-only torch, there is no library): either way a reason, never a silent empty recording
    why = r.start()
    assert why is not None and ("cuptiActivityEnable" in why or "libcupti not found" in why)
    assert r.stop() == ([], "recording was not started")


def test_a_failed_layout_check_keeps_every_later_start_from_recording(monkeypatch):
    # cupti_warmup's verdict sticks: the timing then falls back to events with this reason
    r = kgcupti.Recorder()
    monkeypatch.setattr(kgcupti, "RECORDER", r)
    monkeypatch.setattr(kg_timing, "_cupti_start", lambda: None)
    monkeypatch.setattr(kg_timing, "_cupti_stop", lambda keep=True: ([(1, 5, 9, "?")], None))

    class Cuda:
        @staticmethod
        def synchronize():
            pass

        @staticmethod
        def _sleep(n):
            pass

    monkeypatch.setattr(torch, "cuda", Cuda)
    why = kg_timing.cupti_warmup(torch.device("cpu"))
    assert "did not read" in why
    assert r.start().startswith("CUPTI unusable: CUPTI records did not read")


def test_outputs_file_round_trips_every_dtype_shape_and_string():
    import tempfile

    groups = [
        [torch.randn(3, 5).to(torch.bfloat16), torch.arange(7, dtype=torch.int64), torch.tensor(2.5)],
        [torch.zeros(0, 4), torch.tensor([True, False, True]), "<class 'NoneType'>"],
        "missing",
        [torch.randn(6, 4).t()],  # not contiguous
    ]
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "o.bin")
        kg_handover.write_outputs(p, groups, torch.device("cpu"))
        got = kg_handover.read_outputs(p, torch.device("cpu"))
    assert got[2] == "missing" and got[1][2] == "<class 'NoneType'>"
    for g, h in ((groups[0], got[0]), (groups[1][:2], got[1][:2]), (groups[3], got[3])):
        for a, b in zip(g, h):
            assert b.dtype == a.dtype and b.shape == a.shape and torch.equal(a, b)


def _hostile(path, header, data=b"", magic=kg_handover.OUTPUTS_MAGIC):
    head = json.dumps(header).encode()
    pre = magic + len(head).to_bytes(8, "little") + head
    with open(path, "wb") as f:
        f.write(pre + bytes(kg_handover._aligned(len(pre)) - len(pre)) + data)


@pytest.mark.parametrize("header,data,why", [
    ({"groups": [[{"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16}]]}, b"\0" * 8, "past the end"),
    ({"groups": [[{"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 12}]]}, b"\0" * 16, "do not hold"),
    ({"groups": [[{"dtype": 7, "shape": [1], "offset": 0, "nbytes": 8}]]}, b"\0" * 8, "names no dtype"),
    ({"groups": [[{"dtype": "float32", "shape": [-1], "offset": 0, "nbytes": 4}]]}, b"\0" * 8, "not a list of sizes"),
    ({"groups": [[{"dtype": "float32", "shape": [1], "offset": 3, "nbytes": 4}]]}, b"\0" * 8, "aligned"),
    ({"groups": [[{"dtype": "float32", "shape": [1 << 40], "offset": 0, "nbytes": 1 << 42}]]}, b"\0" * 8, "past the end"),
    ({"groups": 3}, b"", "no list of groups"),
    ([1, 2], b"", "no list of groups"),
])
def test_outputs_file_from_a_hostile_candidate_is_refused_with_the_reason(tmp_path, header, data, why):
    p = str(tmp_path / "o.bin")
    _hostile(p, header, data)
    with pytest.raises(ValueError, match=why):
        kg_handover.read_outputs(p, torch.device("cpu"))


def test_outputs_file_with_a_huge_header_or_another_magic_is_refused(tmp_path):
    p = str(tmp_path / "o.bin")
    with open(p, "wb") as f:
        f.write(kg_handover.OUTPUTS_MAGIC + (kg_handover.OUTPUTS_HEADER_MAX + 1).to_bytes(8, "little"))
    with pytest.raises(ValueError, match="at most"):
        kg_handover.read_outputs(p, torch.device("cpu"))
    _hostile(p, {"groups": []}, magic=b"PK\x03\x04xxxx")
    with pytest.raises(ValueError, match="not a kernelgate outputs file"):
        kg_handover.read_outputs(p, torch.device("cpu"))


def test_outputs_planted_as_a_symlink_or_a_fifo_are_refused_without_following_or_blocking(tmp_path):
    """The judge (maybe root) reads outputs from the candidate's own directory: a symlink there
    could point it at any file, a FIFO would block it until the workload's timeout."""
    real = tmp_path / "real.bin"
    kg_handover.write_outputs(str(real), [[torch.ones(4)]], torch.device("cpu"))
    link = tmp_path / "out_0.bin"
    os.symlink(real, link)
    with pytest.raises(ValueError, match="cannot open"):
        kg_handover.read_outputs(str(link), torch.device("cpu"))
    fifo = tmp_path / "out_1.bin"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        kg_handover.read_outputs(str(fifo), torch.device("cpu"))
    assert kg_handover.read_outputs(str(real), torch.device("cpu"))


def test_outputs_read_on_the_cpu_are_not_overwritten_by_the_next_read(tmp_path):
    cpu = torch.device("cpu")
    a, b = str(tmp_path / "a.bin"), str(tmp_path / "b.bin")
    kg_handover.write_outputs(a, [[torch.ones(4)]], cpu)
    kg_handover.write_outputs(b, [[torch.zeros(4)]], cpu)
    first = kg_handover.read_outputs(a, cpu)
    kg_handover.read_outputs(b, cpu)
    assert torch.equal(first[0][0], torch.ones(4))


def test_an_output_of_a_dtype_outside_the_table_is_named_not_read(tmp_path):
    p = str(tmp_path / "o.bin")
    # its bytes lie past the end: never read, since nothing is made of them
    _hostile(p, {"groups": [[{"dtype": "object", "shape": [2, 3], "offset": 0, "nbytes": 1 << 40}]]})
    (o,), = kg_handover.read_outputs(p, torch.device("cpu"))
    assert isinstance(o, kg_handover.ForeignTensor) and o.dtype_name == "object" and list(o.shape) == [2, 3]


class FakePool:
    """kgvmm.Pool in host memory: all that device_outputs and read_device_outputs use of one."""

    made = []

    def __init__(self, size):
        self.size, self.mem, self.closed = size, torch.zeros(size, dtype=torch.uint8), False

    @classmethod
    def create(cls, nbytes, device):
        p = cls(nbytes)
        cls.made.append(p)
        return p

    def export_fd(self):
        return os.open(os.devnull, os.O_RDONLY)

    def view(self, n):
        return self.mem[:n]

    def close(self):
        self.closed = True


class FakeChannel:
    def __init__(self, fail=False):
        self.sent, self.fail = 0, fail

    def send_fd(self, fd):
        if self.fail:
            raise OSError("the parent handed down no descriptor channel")
        self.sent += 1


@pytest.fixture
def fake_pools(monkeypatch):
    monkeypatch.setattr(kg_handover.kgvmm, "Pool", FakePool)
    monkeypatch.setattr(kg_handover, "_POOL", [])
    FakePool.made = []
    return FakePool.made


def test_device_outputs_reuse_one_pool_and_send_a_descriptor_only_for_a_new_one(fake_pools):
    cpu, chan = torch.device("cpu"), FakeChannel()
    small = [[torch.arange(10, dtype=torch.float32), torch.tensor([True, False])], "missing"]
    d1 = kg_handover.device_outputs(small, cpu, chan)
    assert (d1["pool"], d1["size"], chan.sent) == (1, 2 << 20, 1)
    got = kg_handover.read_device_outputs(d1, cpu, fake_pools[-1])
    assert torch.equal(got[0][0], small[0][0]) and torch.equal(got[0][1], small[0][1]) and got[1] == "missing"
    d2 = kg_handover.device_outputs([[torch.ones(3)]], cpu, chan)  # fits: the same pool, no descriptor
    assert (d2["pool"], chan.sent, len(fake_pools)) == (1, 1, 1)
    big = [[torch.randn(700_000)]]  # 2.8 MB: a pool of 4 MiB, the old one released
    d3 = kg_handover.device_outputs(big, cpu, chan)
    assert (d3["pool"], d3["size"], chan.sent) == (2, 4 << 20, 2) and fake_pools[0].closed
    got = kg_handover.read_device_outputs(d3, cpu, fake_pools[-1])
    # The judge's copy is its own: the candidate writing its pool afterwards changes nothing.
    fake_pools[-1].mem.zero_()
    assert torch.equal(got[0][0], big[0][0])


def test_a_pool_whose_descriptor_cannot_be_sent_is_released_and_not_kept(fake_pools):
    with pytest.raises(OSError, match="no descriptor channel"):
        kg_handover.device_outputs([[torch.ones(3)]], torch.device("cpu"), FakeChannel(fail=True))
    assert fake_pools[0].closed and kg_handover._POOL == []


def test_device_outputs_are_checked_against_the_judges_own_pool_size_not_the_claimed_one():
    pool = FakePool(1 << 20)
    desc = {"pool": 1, "size": 1 << 40,
            "groups": [[{"dtype": "float32", "shape": [1 << 19], "offset": 0, "nbytes": 1 << 21}]]}
    with pytest.raises(ValueError, match="past the end"):
        kg_handover.read_device_outputs(desc, torch.device("cpu"), pool)
    with pytest.raises(ValueError, match="not described"):
        kg_handover.read_device_outputs([1], torch.device("cpu"), pool)


def test_generated_inputs_follow_their_distribution_and_refuse_unknown_ones():
    gen = torch.Generator().manual_seed(3)
    dev = torch.device("cpu")
    i = kg_inputs.generated_tensor({"type": "integer", "low": 2, "high": 5}, (4096,), torch.int64, dev, gen)
    assert i.dtype == torch.int64 and int(i.min()) == 2 and int(i.max()) == 4
    c = kg_inputs.generated_tensor({"type": "constant", "value": 1.5}, (3,), torch.bfloat16, dev, gen)
    assert c.dtype == torch.bfloat16 and bool((c == 1.5).all())
    b = kg_inputs.generated_tensor({"type": "bernoulli", "probability": 0.25}, (20000,), torch.float32, dev, gen)
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(float(b.mean()) - 0.25) < 0.02
    s = kg_inputs.generated_tensor({"type": "simplex", "axis": -1, "temperature": 1.0}, (5, 7), torch.float32, dev, gen)
    assert torch.allclose(s.sum(-1), torch.ones(5))
    u = kg_inputs.generated_tensor({"type": "uniform", "low": -1.0, "high": -0.5}, (1000,), torch.float32, dev, gen)
    assert float(u.min()) >= -1.0 and float(u.max()) < -0.5
    with pytest.raises(ValueError):
        kg_inputs.generated_tensor({"type": "zipf"}, (3,), torch.float32, dev, gen)


def test_nvidia_driver_version_is_read_from_the_kernel_modules_proc_text():
    text = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct 30 2025\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert kg_env._nvidia_driver_from_proc(text) == "580.159.04"
    assert kg_env._nvidia_driver_from_proc("GCC version: 12.2.0\n") is None


def test_no_driver_version_on_the_cpu():
    assert kg_env.driver_version(torch.device("cpu")) is None
    assert "driver" not in kg_env.environment(torch.device("cpu"))["libs"]


def _warmed(what):
    """Which of Triton's modules a fresh interpreter holds after kg_env.warm(what), and what it
    printed to stderr."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import kg_env; kg_env.warm(sys.argv[2] or None); "
            "print(sorted(m for m in ('triton', 'triton.language') if m in sys.modules)); "
            "c = sys.modules.get('triton.runtime.cache'); "
            "print('key computed' if c and c.triton_key.cache_info().currsize else 'no key')")
    import subprocess

    r = subprocess.run([sys.executable, "-c", code, here, what], capture_output=True, text=True, check=True)
    modules, key = r.stdout.strip().splitlines()
    return modules, r.stderr, key


def test_warm_imports_triton_for_a_triton_candidate_and_nothing_otherwise():
    pytest.importorskip("triton", reason="the test interpreter has no Triton")
    assert _warmed("triton")[0] == "['triton', 'triton.language']"
    assert _warmed("")[0] == "[]"
    assert _warmed("unknown")[0] == "[]"


def test_warm_that_fails_says_so_and_leaves_the_work_to_the_solution():
    pytest.importorskip("triton", reason="the test interpreter has no Triton")
    if torch.cuda.is_available():
        pytest.skip("the driver utilities build on a CUDA host; this models one without")
    out, err, key = _warmed("triton-cuda")
    assert out == "['triton', 'triton.language']"
    assert "preparing triton-cuda ahead failed" in err and "the solution does it" in err
    # Triton's own cache key (~0.45 s of a first call) is computed before the driver
    # utilities fail.
    assert key == "key computed"


def test_warm_computes_tritons_cache_key_only_for_a_compiling_triton():
    pytest.importorskip("triton", reason="the test interpreter has no Triton")
    assert _warmed("triton")[2] == "no key", "the interpreter never compiles: no key needed"
