"""Device memory shared between two processes through a file descriptor (CUDA virtual memory
management with POSIX file descriptor handles), so the candidate's outputs move to the judge
GPU to GPU instead of through host files (83 MB cost 60-110 ms through the host on an H200
machine). Legacy CUDA IPC handles do not open across the candidate's PID namespace; a file
descriptor passed over a Unix socket does not depend on PIDs.

Only the driver API through ctypes: nothing to build, and where libcuda or the handle type is
missing every call raises VmmError, on which the caller hands outputs over as files.
"""

import ctypes

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0

# A size the judge maps at most, whatever the candidate claims (its outputs are bounded far
# below this by the batch budget).
MAX_POOL_BYTES = 1 << 40


class VmmError(RuntimeError):
    """A driver call failed or is missing."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_U64 = ctypes.c_uint64
_SIGNATURES = {
    "cuMemGetAllocationGranularity": [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_Prop), ctypes.c_int],
    "cuMemCreate": [ctypes.POINTER(_U64), ctypes.c_size_t, ctypes.POINTER(_Prop), _U64],
    "cuMemExportToShareableHandle": [ctypes.c_void_p, _U64, ctypes.c_int, _U64],
    "cuMemImportFromShareableHandle": [ctypes.POINTER(_U64), ctypes.c_void_p, ctypes.c_int],
    "cuMemAddressReserve": [ctypes.POINTER(_U64), ctypes.c_size_t, ctypes.c_size_t, _U64, _U64],
    "cuMemMap": [_U64, ctypes.c_size_t, ctypes.c_size_t, _U64, _U64],
    "cuMemSetAccess": [_U64, ctypes.c_size_t, ctypes.POINTER(_Access), ctypes.c_size_t],
    "cuMemUnmap": [_U64, ctypes.c_size_t],
    "cuMemAddressFree": [_U64, ctypes.c_size_t],
    "cuMemRelease": [_U64],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}
_LIB = []


def _driver():
    if not _LIB:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            for name, args in _SIGNATURES.items():
                f = getattr(lib, name)
                f.argtypes = args
                f.restype = ctypes.c_int
        except (OSError, AttributeError) as e:
            raise VmmError(f"the CUDA driver's memory-sharing calls are unavailable: {e}") from None
        _LIB.append(lib)
    return _LIB[0]


def _check(rc, what):
    if rc:
        name = ctypes.c_char_p()
        _driver().cuGetErrorName(rc, ctypes.byref(name))
        raise VmmError(f"{what} failed: {(name.value or b'').decode() or 'CUDA error'} ({rc})")


def _prop(device):
    p = _Prop()
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    p.location = _Location(CU_MEM_LOCATION_TYPE_DEVICE, device)
    return p


def granularity(device):
    """The driver's allocation granularity (bytes) for shareable memory on `device`."""
    g = ctypes.c_size_t()
    _check(_driver().cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(_prop(device)),
                                                   CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity")
    return g.value


class _Span:
    """A device address range as `__cuda_array_interface__` (bytes), for torch.as_tensor."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 2}


class Pool:
    """Shareable device memory mapped read-write into this process: made here (`create`, then
    `export_fd` for the other side) or imported from the other side's descriptor (`open`)."""

    def __init__(self, handle, size, device):
        self.handle, self.size, self.device, self.ptr = handle, size, device, None
        lib = _driver()
        ptr = _U64()
        try:
            _check(lib.cuMemAddressReserve(ctypes.byref(ptr), size, 0, 0, 0), "cuMemAddressReserve")
            self.ptr = ptr.value
            _check(lib.cuMemMap(self.ptr, size, 0, handle, 0), "cuMemMap")
            access = _Access(_Location(CU_MEM_LOCATION_TYPE_DEVICE, device), CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            _check(lib.cuMemSetAccess(self.ptr, size, ctypes.byref(access), 1), "cuMemSetAccess")
        except VmmError:
            self._unmap()  # the handle stays the caller's to release
            raise

    @classmethod
    def create(cls, nbytes, device):
        """At least `nbytes` of new shareable memory on `device` (rounded up to the granularity)."""
        g = granularity(device)
        size = max(-(-nbytes // g), 1) * g
        h = _U64()
        _check(_driver().cuMemCreate(ctypes.byref(h), size, ctypes.byref(_prop(device)), 0), "cuMemCreate")
        try:
            return cls(h.value, size, device)
        except VmmError:
            _driver().cuMemRelease(h.value)
            raise

    @classmethod
    def open(cls, fd, size, device):
        """Maps `size` bytes of the memory behind the other side's descriptor `fd` (which stays
        the caller's to close). The driver refuses a size past the memory's own."""
        if type(size) is not int or not 0 < size <= MAX_POOL_BYTES:
            raise VmmError(f"pool size {size!r} is not a positive byte count")
        h = _U64()
        _check(_driver().cuMemImportFromShareableHandle(ctypes.byref(h), ctypes.c_void_p(fd),
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
               "cuMemImportFromShareableHandle")
        try:
            return cls(h.value, size, device)
        except VmmError:
            _driver().cuMemRelease(h.value)
            raise

    def export_fd(self):
        """A new descriptor for this memory, to pass to the other side (the caller closes it)."""
        fd = ctypes.c_int(-1)
        _check(_driver().cuMemExportToShareableHandle(ctypes.byref(fd), self.handle,
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
               "cuMemExportToShareableHandle")
        return fd.value

    def view(self, n):
        """The first `n` bytes as a uint8 CUDA tensor (valid while the pool is open)."""
        import torch

        if not 0 <= n <= self.size:
            raise VmmError(f"{n} bytes asked of a pool of {self.size}")
        try:
            return torch.as_tensor(_Span(self.ptr, n), device=torch.device("cuda", self.device))
        except Exception as e:
            raise VmmError(f"torch cannot view the pool: {type(e).__name__}: {e}") from None

    def close(self):
        """Unmaps and releases this side's hold on the memory (the other side's stays)."""
        self._unmap()
        if self.handle is not None:
            _driver().cuMemRelease(self.handle)
            self.handle = None

    def _unmap(self):
        if self.ptr is not None:
            _driver().cuMemUnmap(self.ptr, self.size)
            _driver().cuMemAddressFree(self.ptr, self.size)
            self.ptr = None
