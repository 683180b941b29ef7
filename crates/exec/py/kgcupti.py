"""CUDA device activity recording (CUPTI's activity API) through ctypes, without Kineto.

torch's profiler (Kineto) also records every runtime and driver API call and post-processes
every record in C++ and Python: on an H200 its stop and parse took 20-30 ms per workload and
side, and its API callbacks lengthened every launch (issue 4, criterion (c)). This records only
what the timing needs, the device activities (kernels, memory copies, memsets) with their
correlation ids (launch order), start and end, and reads them straight from CUPTI's buffers.

A record is read at fixed offsets that every record version since CUDA 11 shares
(cupti_activity.h: CUpti_ActivityKernel4..., CUpti_ActivityMemcpy5, CUpti_ActivityMemset4).
`check()` tests them on the live library: a kernel we launch must come back with its name,
a plausible span and a fresh correlation id, or CUPTI is not used (the caller falls back to
events and says why).
"""

import ctypes
import glob
import os
import struct
import threading
import time

KIND_MEMCPY = 1
KIND_MEMSET = 2
KIND_CONCURRENT_KERNEL = 10
KINDS = (KIND_CONCURRENT_KERNEL, KIND_MEMCPY, KIND_MEMSET)
# CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: also hands back buffers that are not full.
FLUSH_FORCED = 1

# Field offsets (bytes) in the activity records: kind, start and end are common to the three
# kinds; the correlation id and the name sit where the kernel record puts them.
OFF_KIND = 0
OFF_START = 16
OFF_END = 24
OFF_KERNEL_CORRELATION = 92
OFF_KERNEL_NAME = 104
OFF_COPY_KIND = 4  # memcpy: CUpti_ActivityMemcpyKind, one byte
OFF_COPY_CORRELATION = 44  # memcpy and memset

COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
              9: "HtoH", 10: "PtoP"}

# One buffer holds about 40 000 kernel records; a workload's timed calls make a few thousand.
BUFFER_BYTES = 8 << 20
_ALIGN = 8  # ACTIVITY_RECORD_ALIGNMENT


_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_SPAN = struct.Struct("<QQ").unpack_from


def decode(buf, off, names):
    """One record at byte `off` of `buf` (anything struct can read) as (correlation id, start ns,
    end ns, name), or None for a kind we do not record. `names(ptr)` turns a kernel's name
    pointer into its name."""
    (kind,) = _U32(buf, off + OFF_KIND)
    if kind == KIND_CONCURRENT_KERNEL:
        start, end = _SPAN(buf, off + OFF_START)
        (corr,) = _U32(buf, off + OFF_KERNEL_CORRELATION)
        (ptr,) = _U64(buf, off + OFF_KERNEL_NAME)
        return (corr, start, end, names(ptr))
    if kind in (KIND_MEMCPY, KIND_MEMSET):
        start, end = _SPAN(buf, off + OFF_START)
        (corr,) = _U32(buf, off + OFF_COPY_CORRELATION)
        if kind == KIND_MEMSET:
            return (corr, start, end, "Memset")
        copy = buf[off + OFF_COPY_KIND]
        return (corr, start, end, f"Memcpy {COPY_KINDS.get(copy, copy)}")
    return None


def _library_paths():
    """Where libcupti may be: the copy this process already loaded (torch's, through Kineto;
    a second copy in one process would not see the first's activity), torch's pip package,
    then the CUDA toolkit."""
    seen = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.rsplit(" ", 1)[-1].strip()
                if "libcupti" in os.path.basename(p):
                    seen.append(p)
    except OSError:
        pass
    try:
        import torch

        site = os.path.dirname(os.path.dirname(torch.__file__))
        seen += sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libcupti.so*")))
    except Exception:
        pass
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            seen += sorted(glob.glob(os.path.join(home, "extras", "CUPTI", "lib64", "libcupti.so*")))
            seen += sorted(glob.glob(os.path.join(home, "lib64", "libcupti.so*")))
    return list(dict.fromkeys(seen))  # each once, first place first


class Recorder:
    """Records device activities between start() and stop() on the process's devices."""

    def __init__(self):
        self.lib = None
        self.path = None
        self.error = None
        self._req = self._done = None  # the C callbacks, once registered
        self._lock = threading.Lock()
        self._records = []
        self._dropped = 0
        self._free = []
        self._held = {}
        self._names = {}
        self._demangle = _demangler()
        self._on = False
        self._discard = False
        self._decode_s = 0.0
        # Record size per kind, as CUPTI's own iterator laid them out (learn_sizes), so later
        # buffers are read by walk() without a library call per record.
        self._sizes = {}
        # Host time the last stop() spent reading records out of CUPTI's buffers (the rest of
        # its time is CUPTI's own flush): diagnostic, reported with the timing notes.
        self.last_decode_ms = 0.0

    def load(self):
        """Loads libcupti and registers the buffer callbacks. Returns None or why not."""
        if self.lib is not None or self.error is not None:
            return self.error
        tried = []
        for p in _library_paths():
            try:
                lib = ctypes.CDLL(p)  # CDLL: the GIL is released while CUPTI runs
                break
            except OSError as e:
                tried.append(f"{p}: {e}")
        else:
            self.error = "libcupti not found" + (f" ({'; '.join(tried[:3])})" if tried else
                                                 " (looked in this process, torch's nvidia packages, CUDA_HOME)")
            return self.error
        u8p = ctypes.POINTER(ctypes.c_uint8)
        req = ctypes.CFUNCTYPE(None, ctypes.POINTER(u8p), ctypes.POINTER(ctypes.c_size_t),
                               ctypes.POINTER(ctypes.c_size_t))
        done = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, u8p, ctypes.c_size_t, ctypes.c_size_t)
        lib.cuptiActivityGetNextRecord.argtypes = [u8p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        lib.cuptiActivityGetNumDroppedRecords.argtypes = [ctypes.c_void_p, ctypes.c_uint32,
                                                         ctypes.POINTER(ctypes.c_size_t)]
        lib.cuptiActivityRegisterCallbacks.argtypes = [req, done]
        lib.cuptiActivityEnable.argtypes = [ctypes.c_int]
        lib.cuptiActivityDisable.argtypes = [ctypes.c_int]
        lib.cuptiActivityFlushAll.argtypes = [ctypes.c_uint32]
        self._req = req(self._requested)  # kept alive: CUPTI holds the pointers
        self._done = done(self._completed)
        rc = lib.cuptiActivityRegisterCallbacks(self._req, self._done)
        if rc != 0:
            self.error = f"cuptiActivityRegisterCallbacks failed ({_result(lib, rc)}), {p}"
            return self.error
        self.lib, self.path = lib, p
        return None

    def _requested(self, buf, size, max_records):
        b = self._free.pop() if self._free else _aligned_buffer(BUFFER_BYTES)
        addr = ctypes.addressof(b)
        self._held[addr] = b
        buf[0] = ctypes.cast(addr, ctypes.POINTER(ctypes.c_uint8))
        size[0] = BUFFER_BYTES
        max_records[0] = 0  # as many as fit

    def _completed(self, ctx, stream, buf, size, valid):
        addr = ctypes.cast(buf, ctypes.c_void_p).value
        b = self._held.pop(addr, None)
        out = []
        t0 = time.perf_counter()
        if b is not None and valid and not self._discard:
            fast = walk(b, valid, self._sizes, self._name)
            if fast is not None:
                out = fast
            else:
                offsets = []
                rec = ctypes.c_void_p()
                while self.lib.cuptiActivityGetNextRecord(buf, valid, ctypes.byref(rec)) == 0:
                    offsets.append(rec.value - addr)
                    r = decode(b, offsets[-1], self._name)
                    if r is not None:
                        out.append(r)
                learn_sizes(self._sizes, b, offsets)
        dropped = ctypes.c_size_t(0)
        self.lib.cuptiActivityGetNumDroppedRecords(ctx, stream, ctypes.byref(dropped))
        with self._lock:
            self._records += out
            self._dropped += dropped.value
            self._decode_s += time.perf_counter() - t0
        if b is not None:
            self._free.append(b)

    def _name(self, ptr):
        n = self._names.get(ptr)
        if n is None:
            raw = ctypes.string_at(ptr).decode("utf-8", "replace") if ptr else "?"
            n = self._names[ptr] = self._demangle(raw)
        return n

    def start(self):
        """Starts recording. Returns None or why it could not."""
        why = self.load()
        if why:
            return why
        with self._lock:
            self._records, self._dropped, self._decode_s = [], 0, 0.0
        for k in KINDS:
            rc = self.lib.cuptiActivityEnable(k)
            if rc != 0:
                for j in KINDS:
                    self.lib.cuptiActivityDisable(j)
                return f"cuptiActivityEnable({k}) failed ({_result(self.lib, rc)})"
        self._on = True
        return None

    def pause(self):
        """Stops recording new activities until resume() (about 10 us on an H200's host; the
        harness's own work between timed calls then makes no records to read)."""
        for k in KINDS:
            self.lib.cuptiActivityDisable(k)

    def resume(self):
        for k in KINDS:
            self.lib.cuptiActivityEnable(k)

    def stop(self, keep=True):
        """Stops recording (the caller has synchronised the device) and returns (records, why):
        the device activities as (correlation id, start ns, end ns, name), unsorted, and why
        they are incomplete (records CUPTI dropped) or None. keep=False: the records are
        dropped unread (a recording that only had to be on)."""
        if not self._on:
            return [], "recording was not started"
        self._on = False
        for k in KINDS:
            self.lib.cuptiActivityDisable(k)
        self._discard = not keep
        try:
            rc = self.lib.cuptiActivityFlushAll(FLUSH_FORCED)
        finally:
            self._discard = False
        with self._lock:
            recs, dropped = self._records, self._dropped
            self.last_decode_ms = self._decode_s * 1e3
            self._records, self._dropped, self._decode_s = [], 0, 0.0
        if rc != 0:
            return recs, f"cuptiActivityFlushAll failed ({_result(self.lib, rc)})"
        if dropped:
            return recs, f"CUPTI dropped {dropped} activity records"
        return recs, None


def learn_sizes(sizes, buf, offsets):
    """Records in `sizes` (kind -> bytes) the size of each record of `buf` at `offsets` (where
    CUPTI's iterator found them, in order) that another follows. A kind seen at two sizes is
    marked 0: never walked."""
    for here, nxt in zip(offsets, offsets[1:]):
        (kind,) = _U32(buf, here + OFF_KIND)
        size = nxt - here
        if sizes.get(kind, size) != size:
            size = 0
        sizes[kind] = size


def walk(buf, valid, sizes, name):
    """The records in the first `valid` bytes of `buf`, as decode() reads them, stepping by the
    learned size of each kind (no library call per record: those calls were over half of
    reading a buffer's records on an H200), or None when a kind's size is not known, a record
    would run past `valid`, or the steps do not end exactly at `valid` (the caller then
    iterates with CUPTI's own cuptiActivityGetNextRecord)."""
    out = []
    off = 0
    while off < valid:
        (kind,) = _U32(buf, off + OFF_KIND)
        step = sizes.get(kind)
        if not step or off + step > valid:
            return None
        r = decode(buf, off, name)
        if r is not None:
            out.append(r)
        off += step
    return out if off == valid else None


def _aligned_buffer(n):
    b = (ctypes.c_uint8 * n)()
    if ctypes.addressof(b) % _ALIGN:
        raise MemoryError("activity buffer not 8-byte aligned")
    return b


def _result(lib, rc):
    s = ctypes.c_char_p()
    try:
        lib.cuptiGetResultString(rc, ctypes.byref(s))
        return f"{rc}: {s.value.decode()}" if s.value else str(rc)
    except Exception:
        return str(rc)


def _demangler():
    """Itanium C++ demangling through the C++ runtime torch already loaded (kernel names come
    mangled; Kineto showed them demangled). Falls back to the raw name."""
    try:
        cxx = ctypes.CDLL("libstdc++.so.6")
        libc = ctypes.CDLL(None)
        fn = cxx.__cxa_demangle
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        libc.free.argtypes = [ctypes.c_void_p]
    except (OSError, AttributeError):
        return lambda s: s

    def demangle(s):
        if not s.startswith("_Z"):
            return s
        status = ctypes.c_int(0)
        p = fn(s.encode(), None, None, ctypes.byref(status))
        if not p or status.value != 0:
            return s
        try:
            return ctypes.string_at(p).decode("utf-8", "replace")
        finally:
            libc.free(p)

    return demangle


RECORDER = Recorder()
