//! Whether a solution's language can run here, decided before anything starts.
//!
//! A `cuda_cpp` solution on a machine that cannot build or run it used to fail as the
//! candidate's COMPILE_ERROR, with torch's own hints ("Ninja is required", then `CUDA_HOME`),
//! although nothing about the candidate was wrong. Here the missing piece is named up front and
//! nothing is evaluated.

use std::path::{Path, PathBuf};

use kg_contract::Solution;

use crate::placement::DeviceChoice;

/// Languages whose sources are built by `torch.utils.cpp_extension` (nvcc, ninja, a C++
/// compiler).
const CPP_LANGUAGES: [&str; 3] = ["cuda_cpp", "cuda", "cpp"];
/// Languages built by torch's ROCm extension build with `hipcc` (the ROCm port's `hip_cpp`).
const HIP_LANGUAGES: [&str; 1] = ["hip_cpp"];

/// What a solution needs that this host or device lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The language that needs it (`cuda_cpp`).
    pub language: String,
    /// What is missing, in words (`a CUDA device`, `nvcc`).
    pub missing: String,
    /// What to do about it.
    pub fix: String,
}

/// The first thing `sol` needs to build and run on `device` that is absent, or `None`.
/// `python`: the interpreter the workers run (its `bin` directory is on the build's PATH).
/// `env`: looks up a variable of kg-bench's environment (`std::env::var_os` outside tests).
pub fn missing_for(
    sol: &Solution,
    device: &DeviceChoice,
    python: &Path,
    env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<Missing> {
    if let Some(language) = sol
        .spec
        .languages
        .iter()
        .find(|l| HIP_LANGUAGES.contains(&l.to_lowercase().as_str()))
    {
        return missing_for_hip(language, device, python, env);
    }
    let language = sol
        .spec
        .languages
        .iter()
        .find(|l| CPP_LANGUAGES.contains(&l.to_lowercase().as_str()))?
        .clone();
    let miss = |missing: &str, fix: &str| {
        Some(Missing {
            language: language.clone(),
            missing: missing.to_string(),
            fix: fix.to_string(),
        })
    };
    match device {
        DeviceChoice::Cpu => {
            return miss(
                "a CUDA device (CUDA C++ kernels do not run on the CPU)",
                "run it with --device cuda:N on a machine with an NVIDIA GPU",
            );
        }
        // torch hipifies CUDA sources on ROCm; its toolchain (hipcc) is found by torch.
        DeviceChoice::Rocm(_) => return None,
        DeviceChoice::Cuda(_) => {}
    }
    let path = build_path(python, env("PATH"));
    if find_nvcc(&path, env).is_none() {
        return miss(
            "nvcc (no CUDA_HOME/CUDA_PATH with bin/nvcc, no nvcc on PATH, no /usr/local/cuda)",
            "install the CUDA toolkit, or set CUDA_HOME to it",
        );
    }
    if which("ninja", &path).is_none() {
        return miss(
            "ninja (torch.utils.cpp_extension builds with it)",
            &format!(
                "`{} -m pip install ninja`, or put ninja on PATH",
                python.display()
            ),
        );
    }
    let cxx = env("CXX").map(PathBuf::from);
    let compiler_found = match &cxx {
        Some(c) if c.components().count() > 1 => c.is_file(),
        Some(c) => which(&c.to_string_lossy(), &path).is_some(),
        None => ["c++", "g++", "clang++"]
            .iter()
            .any(|c| which(c, &path).is_some()),
    };
    if !compiler_found {
        return miss(
            "a C++ compiler (CXX, or c++/g++/clang++ on PATH)",
            "install one (e.g. g++), or set CXX",
        );
    }
    None
}

/// [`missing_for`] of a `hip_cpp` solution: an AMD GPU, `hipcc` (found as the ROCm port
/// finds it: `ROCM_PATH/bin`, PATH, `/opt/rocm/bin`) and ninja.
fn missing_for_hip(
    language: &str,
    device: &DeviceChoice,
    python: &Path,
    env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<Missing> {
    let miss = |missing: &str, fix: String| {
        Some(Missing {
            language: language.to_string(),
            missing: missing.to_string(),
            fix,
        })
    };
    match device {
        DeviceChoice::Cpu => {
            return miss(
                "an AMD GPU (HIP C++ kernels do not run on the CPU)",
                "run it with --device rocm:N on a machine with ROCm".into(),
            );
        }
        DeviceChoice::Cuda(_) => {
            return miss(
                "an AMD GPU with ROCm (HIP C++ is built by torch's ROCm extension build; this device is NVIDIA's)",
                "run it with --device rocm:N on a machine with ROCm, or port it to cuda_cpp".into(),
            );
        }
        DeviceChoice::Rocm(_) => {}
    }
    let path = build_path(python, env("PATH"));
    let in_root = env("ROCM_PATH")
        .map(|r| PathBuf::from(r).join("bin").join("hipcc"))
        .filter(|p| p.is_file());
    let hipcc = in_root
        .or_else(|| which("hipcc", &path))
        .or_else(|| Some(PathBuf::from("/opt/rocm/bin/hipcc")).filter(|p| p.is_file()));
    if hipcc.is_none() {
        return miss(
            "hipcc (no ROCM_PATH with bin/hipcc, no hipcc on PATH, no /opt/rocm)",
            "install ROCm, or set ROCM_PATH to it".into(),
        );
    }
    if which("ninja", &path).is_none() {
        return miss(
            "ninja (torch.utils.cpp_extension builds with it)",
            format!(
                "`{} -m pip install ninja`, or put ninja on PATH",
                python.display()
            ),
        );
    }
    None
}

/// The PATH a candidate's build sees: the interpreter's own `bin` directory first (a venv's
/// `ninja` lives there and is not on the caller's PATH when the venv is not activated), then
/// kg-bench's PATH.
pub fn build_path(python: &Path, inherited: Option<std::ffi::OsString>) -> std::ffi::OsString {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(bin) = python.parent().filter(|d| !d.as_os_str().is_empty()) {
        dirs.push(bin.to_path_buf());
    }
    if let Some(p) = &inherited {
        for d in std::env::split_paths(p) {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    // Directories with a `:` cannot be on a PATH; they are dropped rather than failing.
    std::env::join_paths(dirs.iter().filter(|d| !d.to_string_lossy().contains(':')))
        .unwrap_or_default()
}

/// Whether `sol` is built from C++/CUDA/HIP sources (by kernelgate's builder, into a module
/// the candidate loads) rather than imported as Python.
pub fn is_compiled(sol: &Solution) -> bool {
    sol.spec.languages.iter().any(|l| {
        let l = l.to_lowercase();
        CPP_LANGUAGES.contains(&l.as_str()) || HIP_LANGUAGES.contains(&l.as_str())
    })
}

/// The compilers a build of `sol` would use, as [`missing_for`] finds them: the device
/// compiler (`nvcc`, or `hipcc` for `hip_cpp`) and the host C++ compiler (`CXX`, else
/// `c++`/`g++`/`clang++` on the build's PATH). For the build cache's key.
pub fn build_compilers(
    sol: &Solution,
    python: &Path,
    env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> (Option<PathBuf>, Option<PathBuf>) {
    let path = build_path(python, env("PATH"));
    let hip = sol
        .spec
        .languages
        .iter()
        .any(|l| HIP_LANGUAGES.contains(&l.to_lowercase().as_str()));
    let device = if hip {
        env("ROCM_PATH")
            .map(|r| PathBuf::from(r).join("bin").join("hipcc"))
            .filter(|p| p.is_file())
            .or_else(|| which("hipcc", &path))
    } else {
        find_nvcc(&path, env)
    };
    let host = match env("CXX").map(PathBuf::from) {
        Some(c) if c.components().count() > 1 => Some(c),
        Some(c) => which(&c.to_string_lossy(), &path),
        None => ["c++", "g++", "clang++"]
            .iter()
            .find_map(|c| which(c, &path)),
    };
    (device, host)
}

/// Where torch's `_find_cuda_home` would find nvcc, in its order.
fn find_nvcc(
    path: &std::ffi::OsStr,
    env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(home) = env(var) {
            let nvcc = PathBuf::from(home).join("bin").join("nvcc");
            return nvcc.is_file().then_some(nvcc);
        }
    }
    which("nvcc", path).or_else(|| {
        let nvcc = PathBuf::from("/usr/local/cuda/bin/nvcc");
        nvcc.is_file().then_some(nvcc)
    })
}

/// The first executable file called `name` in the directories of `path`.
fn which(name: &str, path: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path).map(|d| d.join(name)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;

    fn solution(language: &str) -> Solution {
        serde_json::from_value(serde_json::json!({
            "name": "s", "definition": "d", "author": "t",
            "spec": {"languages": [language], "target_hardware": ["any"],
                     "entry_point": "k.cu::run"},
            "sources": [{"path": "k.cu", "content": ""}]
        }))
        .unwrap()
    }

    fn exe(dir: &Path, name: &str) {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A fake host: `bin` holds the tools named, `venv/bin` the interpreter (and ninja where
    /// asked), and the environment is only what the map says.
    struct Host {
        _dir: tempfile::TempDir,
        python: PathBuf,
        env: HashMap<String, std::ffi::OsString>,
    }

    fn host(tools: &[&str], ninja_in_venv: bool, cuda_home: bool) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let venv = dir.path().join("venv/bin");
        let cuda = dir.path().join("cuda/bin");
        for d in [&bin, &venv, &cuda] {
            std::fs::create_dir_all(d).unwrap();
        }
        for t in tools {
            exe(&bin, t);
        }
        exe(&venv, "python");
        if ninja_in_venv {
            exe(&venv, "ninja");
        }
        exe(&cuda, "nvcc");
        let mut env = HashMap::new();
        env.insert("PATH".to_string(), bin.clone().into_os_string());
        if cuda_home {
            env.insert(
                "CUDA_HOME".to_string(),
                dir.path().join("cuda").into_os_string(),
            );
        }
        Host {
            python: venv.join("python"),
            env,
            _dir: dir,
        }
    }

    fn check(h: &Host, lang: &str, device: DeviceChoice) -> Option<Missing> {
        missing_for(&solution(lang), &device, &h.python, &|k| {
            h.env.get(k).cloned()
        })
    }

    #[test]
    fn cuda_cpp_on_the_cpu_is_refused_naming_the_device() {
        let h = host(&["g++", "ninja", "nvcc"], false, true);
        let m = check(&h, "cuda_cpp", DeviceChoice::Cpu).expect("refused");
        assert!(m.missing.contains("CUDA device"), "{m:?}");
        assert_eq!(m.language, "cuda_cpp");
        // Languages the CPU runs need nothing of this.
        assert_eq!(check(&h, "triton", DeviceChoice::Cpu), None);
        assert_eq!(check(&h, "pytorch", DeviceChoice::Cpu), None);
    }

    #[test]
    fn ninja_in_the_interpreters_bin_counts_although_not_on_path() {
        let h = host(&["g++"], true, true);
        assert_eq!(check(&h, "cuda_cpp", DeviceChoice::Cuda(0)), None);
        let h = host(&["g++"], false, true);
        let m = check(&h, "cuda_cpp", DeviceChoice::Cuda(0)).expect("no ninja anywhere");
        assert!(m.missing.starts_with("ninja"), "{m:?}");
        assert!(m.fix.contains("pip install ninja"), "{m:?}");
    }

    #[test]
    fn nvcc_and_a_compiler_are_named_when_missing() {
        let h = host(&["g++", "ninja"], false, false);
        let m = check(&h, "cuda_cpp", DeviceChoice::Cuda(0));
        // /usr/local/cuda may exist on a developer's machine; then nvcc is found there.
        if !Path::new("/usr/local/cuda/bin/nvcc").is_file() {
            assert!(m.expect("no nvcc").missing.starts_with("nvcc"));
        }
        // The fake PATH holds no compiler and CXX is unset.
        let h = host(&["nvcc", "ninja"], false, false);
        let m = check(&h, "cuda_cpp", DeviceChoice::Cuda(0)).expect("no compiler");
        assert!(m.missing.starts_with("a C++ compiler"), "{m:?}");
    }

    #[test]
    fn hip_cpp_needs_an_amd_gpu_and_hipcc() {
        let h = host(&["ninja"], false, false);
        let m = check(&h, "hip_cpp", DeviceChoice::Cpu).expect("the CPU refuses it");
        assert!(m.missing.contains("AMD GPU"), "{m:?}");
        let m = check(&h, "hip_cpp", DeviceChoice::Cuda(0)).expect("an NVIDIA device refuses it");
        assert!(m.missing.contains("NVIDIA"), "{m:?}");
        if !Path::new("/opt/rocm/bin/hipcc").is_file() {
            let m = check(&h, "hip_cpp", DeviceChoice::Rocm(0)).expect("no hipcc");
            assert!(m.missing.starts_with("hipcc"), "{m:?}");
        }
        // A ROCm root named by ROCM_PATH, with ninja on PATH: nothing missing.
        let mut h = host(&["ninja"], false, false);
        let rocm = h.python.parent().unwrap().parent().unwrap().join("rocm");
        std::fs::create_dir_all(rocm.join("bin")).unwrap();
        exe(&rocm.join("bin"), "hipcc");
        h.env.insert("ROCM_PATH".into(), rocm.into_os_string());
        assert_eq!(check(&h, "hip_cpp", DeviceChoice::Rocm(0)), None);
        // cuda_cpp on ROCm is hipified by torch: not refused here.
        assert_eq!(check(&h, "cuda_cpp", DeviceChoice::Rocm(0)), None);
    }

    #[test]
    fn build_path_puts_the_interpreters_bin_first_once() {
        let p = build_path(
            Path::new("/venv/bin/python"),
            Some("/usr/bin:/venv/bin:/bin".into()),
        );
        assert_eq!(p, std::ffi::OsString::from("/venv/bin:/usr/bin:/bin"));
        assert_eq!(
            build_path(Path::new("python3"), None),
            std::ffi::OsString::new()
        );
    }
}
