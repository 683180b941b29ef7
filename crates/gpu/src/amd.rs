//! AMD backend through AMD SMI (`libamd_smi.so`), loaded at run time with our own small
//! `libloading` bindings (amdsmi-sys lacks clock calls and pins one struct layout).
//!
//! Only calls whose argument layout has been stable across AMD SMI releases are bound, and
//! every struct is read from a zeroed buffer larger than any released layout, reading only
//! leading fields: `market_name` (asic info), `vram_total`/`vram_used` (MB), `gfx_activity`,
//! and the clock info's `clk`/`max_clk`. Architecture and HIP index come from the KFD topology
//! ([`crate::mapping`]). Processes, temperature and power are not read (`None`).
//!
//! Not yet run on AMD hardware: the development machines have none. The H200 evidence covers
//! NVML only.

// FFI into a runtime-loaded C library: each call is `unsafe`, with its contract stated at the
// call site.
#![allow(unsafe_code)]

use std::ffi::{OsString, c_char, c_void};

use libloading::Library;

use crate::backend::Backend;
use crate::device::{Clocks, DeviceInfo, IndexBasis, Sample, Vendor};
use crate::env;
use crate::error::{BackendError, ClockError};

const NAME: &str = "amdsmi";
const INIT_AMD_GPUS: u64 = 1 << 1;
const STATUS_SUCCESS: u32 = 0;
const STATUS_NOT_SUPPORTED: u32 = 2;
const STATUS_NO_PERM: u32 = 10;
const STATUS_DRIVER_NOT_LOADED: u32 = 34;
const CLK_TYPE_GFX: u32 = 0;
const CLK_TYPE_MEM: u32 = 4;
const PERF_LEVEL_AUTO: u32 = 0;

type Handle = *mut c_void;
type InitFn = unsafe extern "C" fn(u64) -> u32;
type ShutDownFn = unsafe extern "C" fn() -> u32;
type SocketHandlesFn = unsafe extern "C" fn(*mut u32, *mut Handle) -> u32;
type ProcessorHandlesFn = unsafe extern "C" fn(Handle, *mut u32, *mut Handle) -> u32;
type UuidFn = unsafe extern "C" fn(Handle, *mut u32, *mut c_char) -> u32;
type BdfFn = unsafe extern "C" fn(Handle, *mut u64) -> u32;
type BufFn = unsafe extern "C" fn(Handle, *mut u8) -> u32;
type ClockInfoFn = unsafe extern "C" fn(Handle, u32, *mut u8) -> u32;
type DeterminismFn = unsafe extern "C" fn(Handle, u64) -> u32;
type PerfLevelFn = unsafe extern "C" fn(Handle, u32) -> u32;

struct Api {
    shut_down: ShutDownFn,
    socket_handles: SocketHandlesFn,
    processor_handles: ProcessorHandlesFn,
    uuid: UuidFn,
    bdf: BdfFn,
    asic_info: BufFn,
    vram_usage: BufFn,
    activity: BufFn,
    clock_info: Option<ClockInfoFn>,
    set_determinism: Option<DeterminismFn>,
    set_perf_level: Option<PerfLevelFn>,
    // Keeps the function pointers above valid; dropped last.
    _lib: Library,
}

/// AMD SMI, initialised for AMD GPUs. Processor handles are enumerated once at load.
pub struct AmdSmiBackend {
    api: Api,
    handles: Vec<Handle>,
}

// SAFETY: AMD SMI handles are opaque identifiers valid for the library's lifetime and the
// library is thread-safe after init; we never share them across threads concurrently anyway
// (the backend is used behind `&mut`/single owner).
unsafe impl Send for AmdSmiBackend {}

fn status_error(what: &'static str, device: Option<u32>, code: u32) -> BackendError {
    BackendError::Query {
        backend: NAME,
        what,
        device,
        message: format!("amdsmi status {code}"),
    }
}

fn candidates() -> Vec<OsString> {
    if let Some(p) = std::env::var_os(env::KG_AMDSMI_LIB) {
        return vec![p];
    }
    let mut v = vec![OsString::from("libamd_smi.so")];
    if let Some(root) = std::env::var_os("ROCM_PATH") {
        let mut p = std::path::PathBuf::from(root);
        p.push("lib/libamd_smi.so");
        v.push(p.into_os_string());
    }
    v.push(OsString::from("/opt/rocm/lib/libamd_smi.so"));
    v
}

fn error_chain(e: &libloading::Error) -> String {
    use std::error::Error as _;
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        src = inner.source();
    }
    s
}

impl Api {
    fn open() -> Result<Api, BackendError> {
        let mut reasons = Vec::new();
        for path in candidates() {
            // SAFETY: loading a shared library runs its initialisers; libamd_smi's are the
            // vendor's and have no preconditions on our side.
            match unsafe { Library::new(&path) } {
                Ok(lib) => return Api::bind(lib),
                Err(e) => reasons.push(error_chain(&e)),
            }
        }
        Err(BackendError::Unavailable {
            backend: NAME,
            reason: reasons.join("; "),
        })
    }

    fn bind(lib: Library) -> Result<Api, BackendError> {
        fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, BackendError> {
            // SAFETY: `T` is the C signature of `name` as declared in amdsmi.h; the pointer is
            // used only while `lib` lives (both are kept in `Api`).
            unsafe { lib.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| BackendError::Unavailable {
                    backend: NAME,
                    reason: format!("symbol {name} missing: {}", error_chain(&e)),
                })
        }
        let init: InitFn = sym(&lib, "amdsmi_init")?;
        let api = Api {
            shut_down: sym(&lib, "amdsmi_shut_down")?,
            socket_handles: sym(&lib, "amdsmi_get_socket_handles")?,
            processor_handles: sym(&lib, "amdsmi_get_processor_handles")?,
            uuid: sym(&lib, "amdsmi_get_gpu_device_uuid")?,
            bdf: sym(&lib, "amdsmi_get_gpu_device_bdf")?,
            asic_info: sym(&lib, "amdsmi_get_gpu_asic_info")?,
            vram_usage: sym(&lib, "amdsmi_get_gpu_vram_usage")?,
            activity: sym(&lib, "amdsmi_get_gpu_activity")?,
            clock_info: sym(&lib, "amdsmi_get_clock_info").ok(),
            set_determinism: sym(&lib, "amdsmi_set_gpu_perf_determinism_mode").ok(),
            set_perf_level: sym(&lib, "amdsmi_set_gpu_perf_level").ok(),
            _lib: lib,
        };
        // SAFETY: plain init call with a flag word.
        let rc = unsafe { init(INIT_AMD_GPUS) };
        match rc {
            STATUS_SUCCESS => Ok(api),
            STATUS_DRIVER_NOT_LOADED => Err(BackendError::Unavailable {
                backend: NAME,
                reason: "amdgpu driver not loaded (AMDSMI_STATUS_DRIVER_NOT_LOADED)".into(),
            }),
            code => Err(status_error("initialisation", None, code)),
        }
    }
}

impl Drop for AmdSmiBackend {
    fn drop(&mut self) {
        // SAFETY: balanced with the successful `amdsmi_init` in `Api::bind`.
        let _ = unsafe { (self.api.shut_down)() };
    }
}

fn cstr(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim().to_string()
}

fn u32_at(buf: &[u8], offset: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[offset..offset + 4]);
    u32::from_ne_bytes(b)
}

impl AmdSmiBackend {
    /// Loads `libamd_smi.so` (`KG_AMDSMI_LIB`, else the loader path, `$ROCM_PATH/lib`,
    /// `/opt/rocm/lib`), initialises it and enumerates GPU handles.
    pub fn load() -> Result<AmdSmiBackend, BackendError> {
        let api = Api::open()?;
        let mut b = AmdSmiBackend {
            api,
            handles: Vec::new(),
        };
        b.handles = b.enumerate()?;
        Ok(b)
    }

    fn enumerate(&self) -> Result<Vec<Handle>, BackendError> {
        let mut n: u32 = 0;
        // SAFETY: count query with a null array, as documented.
        let rc = unsafe { (self.api.socket_handles)(&mut n, std::ptr::null_mut()) };
        if rc != STATUS_SUCCESS {
            return Err(status_error("socket handles", None, rc));
        }
        let mut sockets: Vec<Handle> = vec![std::ptr::null_mut(); n as usize];
        // SAFETY: `sockets` has room for `n` handles.
        let rc = unsafe { (self.api.socket_handles)(&mut n, sockets.as_mut_ptr()) };
        if rc != STATUS_SUCCESS {
            return Err(status_error("socket handles", None, rc));
        }
        sockets.truncate(n as usize);
        let mut out = Vec::new();
        for s in sockets {
            let mut m: u32 = 0;
            // SAFETY: count query with a null array.
            let rc = unsafe { (self.api.processor_handles)(s, &mut m, std::ptr::null_mut()) };
            if rc != STATUS_SUCCESS {
                return Err(status_error("processor handles", None, rc));
            }
            let mut ps: Vec<Handle> = vec![std::ptr::null_mut(); m as usize];
            // SAFETY: `ps` has room for `m` handles.
            let rc = unsafe { (self.api.processor_handles)(s, &mut m, ps.as_mut_ptr()) };
            if rc != STATUS_SUCCESS {
                return Err(status_error("processor handles", None, rc));
            }
            ps.truncate(m as usize);
            out.extend(ps);
        }
        Ok(out)
    }

    fn handle(&self, index: u32) -> Result<Handle, BackendError> {
        self.handles
            .get(index as usize)
            .copied()
            .ok_or(BackendError::Query {
                backend: NAME,
                what: "device handle",
                device: Some(index),
                message: "no such device".into(),
            })
    }

    fn read_buf(
        &self,
        f: BufFn,
        what: &'static str,
        index: u32,
    ) -> Result<Result<Vec<u8>, u32>, BackendError> {
        let h = self.handle(index)?;
        // Larger than every released layout of the structs read this way.
        let mut buf = vec![0u8; 4096];
        // SAFETY: `buf` is zeroed and larger than the struct the function fills.
        let rc = unsafe { f(h, buf.as_mut_ptr()) };
        match rc {
            STATUS_SUCCESS => Ok(Ok(buf)),
            STATUS_NOT_SUPPORTED => Ok(Err(rc)),
            code => Err(status_error(what, Some(index), code)),
        }
    }

    fn clock(&self, index: u32, kind: u32) -> Option<(u32, u32)> {
        let f = self.api.clock_info?;
        let h = self.handle(index).ok()?;
        let mut buf = vec![0u8; 256];
        // SAFETY: `buf` is larger than amdsmi_clk_info_t (32 bytes).
        let rc = unsafe { f(h, kind, buf.as_mut_ptr()) };
        (rc == STATUS_SUCCESS).then(|| (u32_at(&buf, 0), u32_at(&buf, 8)))
    }
}

impl Backend for AmdSmiBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn vendor(&self) -> Vendor {
        Vendor::Amd
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        let mut out = Vec::new();
        for (i, &h) in self.handles.iter().enumerate() {
            let i = i as u32;
            let mut uuid = vec![0u8; 128];
            let mut len: u32 = 127;
            // SAFETY: `uuid` holds `len` + 1 bytes.
            let rc = unsafe { (self.api.uuid)(h, &mut len, uuid.as_mut_ptr().cast()) };
            if rc != STATUS_SUCCESS {
                return Err(status_error("uuid", Some(i), rc));
            }
            let mut bdf: u64 = 0;
            // SAFETY: amdsmi_bdf_t is a 64-bit union.
            let rc = unsafe { (self.api.bdf)(h, &mut bdf) };
            if rc != STATUS_SUCCESS {
                return Err(status_error("pci bus id", Some(i), rc));
            }
            let (func, dev, bus, domain) = (
                bdf & 0x7,
                (bdf >> 3) & 0x1f,
                (bdf >> 8) & 0xff,
                (bdf >> 16) & 0xffff_ffff_ffff,
            );
            let name = match self.read_buf(self.api.asic_info, "asic info", i)? {
                Ok(buf) => cstr(&buf[..256]),
                Err(_) => String::from("AMD GPU"),
            };
            let sample = self.sample(i)?;
            let total = match self.read_buf(self.api.vram_usage, "vram usage", i)? {
                Ok(buf) => Some(u64::from(u32_at(&buf, 0)) << 20),
                Err(_) => None,
            };
            out.push(DeviceInfo {
                vendor: Vendor::Amd,
                backend: NAME.into(),
                smi_index: i,
                runtime_index: None,
                runtime_index_basis: IndexBasis::Unknown,
                uuid: cstr(&uuid),
                pci_bus_id: format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"),
                name,
                arch: None,
                memory_total_bytes: total,
                sample,
                clocks: self.clocks(i)?,
                temperature_c: None,
                power_w: None,
                processes: None,
                kfd_unique_id: None,
            });
        }
        Ok(out)
    }

    fn sample(&self, smi_index: u32) -> Result<Sample, BackendError> {
        let (used, free) = match self.read_buf(self.api.vram_usage, "vram usage", smi_index)? {
            Ok(buf) => {
                let total = u64::from(u32_at(&buf, 0)) << 20;
                let used = u64::from(u32_at(&buf, 4)) << 20;
                (Some(used), Some(total.saturating_sub(used)))
            }
            Err(_) => (None, None),
        };
        // Activity is optional: some driver / amd-smi combinations fail it while everything
        // else works (the seed's `vram-only` case). Any failure is "unknown", never 0.
        let activity = match self.read_buf(self.api.activity, "gpu activity", smi_index) {
            Ok(Ok(buf)) => {
                let v = u32_at(&buf, 0);
                (v <= 100).then_some(f64::from(v))
            }
            _ => None,
        };
        Ok(Sample {
            activity_pct: activity,
            memory_used_bytes: used,
            memory_free_bytes: free,
        })
    }

    fn clocks(&self, smi_index: u32) -> Result<Clocks, BackendError> {
        let gfx = self.clock(smi_index, CLK_TYPE_GFX);
        let mem = self.clock(smi_index, CLK_TYPE_MEM);
        Ok(Clocks {
            sm_mhz: gfx.map(|c| c.0),
            sm_max_mhz: gfx.map(|c| c.1),
            sm_base_mhz: None,
            mem_mhz: mem.map(|c| c.0),
            mem_max_mhz: mem.map(|c| c.1),
        })
    }

    fn lock_sm_clock(&mut self, smi_index: u32, mhz: u32) -> Result<(), ClockError> {
        let f = self.api.set_determinism.ok_or_else(|| {
            ClockError::Unsupported(
                "amdsmi_set_gpu_perf_determinism_mode not in this library".into(),
            )
        })?;
        let h = self
            .handle(smi_index)
            .map_err(|e| ClockError::Failed(e.to_string()))?;
        // SAFETY: handle from enumeration, plain integer argument.
        match unsafe { f(h, u64::from(mhz)) } {
            STATUS_SUCCESS => Ok(()),
            STATUS_NO_PERM => Err(ClockError::NoPermission(
                "AMD SMI refused (AMDSMI_STATUS_NO_PERM); setting perf determinism needs root"
                    .into(),
            )),
            STATUS_NOT_SUPPORTED => Err(ClockError::Unsupported(
                "perf determinism mode is not supported on this device".into(),
            )),
            code => Err(ClockError::Failed(format!("amdsmi status {code}"))),
        }
    }

    fn reset_clocks(&mut self, smi_index: u32) -> Result<(), ClockError> {
        let f = self.api.set_perf_level.ok_or_else(|| {
            ClockError::Unsupported("amdsmi_set_gpu_perf_level not in this library".into())
        })?;
        let h = self
            .handle(smi_index)
            .map_err(|e| ClockError::Failed(e.to_string()))?;
        // SAFETY: handle from enumeration, plain enum argument (AMDSMI_DEV_PERF_LEVEL_AUTO).
        match unsafe { f(h, PERF_LEVEL_AUTO) } {
            STATUS_SUCCESS => Ok(()),
            code => Err(ClockError::Failed(format!("amdsmi status {code}"))),
        }
    }
}
