//! kernelgate's builder and the build cache, with a real compiler: a C++ module (pybind11
//! only, so it builds in seconds on the CPU) is built once by a builder process, found in the
//! cache the second time, rebuilt when its cached module was changed, and a source that does
//! not compile is a compile error with the compiler's message.

use std::path::Path;
use std::time::Duration;

use kg_contract::{Solution, Status};
use kg_exec::build::{BuildCache, BuildKey};
use kg_exec::{CancelToken, DeviceChoice, EvalOptions, Session};

mod support;
use support::python;

fn solution(name: &str, body: &str) -> Solution {
    let src = format!(
        "#include <pybind11/pybind11.h>\n{body}\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def(\"add_two\", &add_two); }}\n"
    );
    serde_json::from_value(serde_json::json!({
        "name": name, "definition": "d", "author": "test",
        "spec": {"languages": ["cuda_cpp"], "target_hardware": ["any"],
                 "entry_point": "ext.cpp::add_two",
                 // A host-only module: no CUDA driver library to link (CI has none).
                 "compile_options": {"ld_flags": []}},
        "sources": [{"path": "ext.cpp", "content": src}],
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn session(cache: &Path) -> Session {
    let mut opts = EvalOptions::new(DeviceChoice::Cpu);
    opts.cache_dir = cache.to_path_buf();
    opts.compile_timeout = Duration::from_secs(600);
    Session::new(python(), opts, CancelToken::new()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_build_is_made_once_cached_and_made_again_when_its_module_changed() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut s = session(dir.path());
    let sol = solution("ok", "int add_two(int x) { return x + 2; }");
    let first = match s.build(&sol) {
        Ok(Ok(b)) => b,
        Ok(Err((st, log))) => panic!("{st:?}: {log}"),
        Err(e) => panic!("{e}"),
    };
    assert!(!first.cached);
    assert!(first.hit.module.is_file());
    let key: BuildKey = s.build_key(&sol).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first.hit.entry.key, key.key);
    assert!(
        first
            .hit
            .module
            .starts_with(dir.path().join("builds-v1").join(&key.key))
    );
    // The second time: from the cache, the same module.
    let second = match s.build(&sol) {
        Ok(Ok(b)) => b,
        other => panic!("{other:?}"),
    };
    assert!(second.cached);
    assert_eq!(
        second.hit.entry.module_sha256,
        first.hit.entry.module_sha256
    );
    // A module changed in the cache is never used: the solution is built again.
    std::fs::write(&first.hit.module, b"not a module").unwrap_or_else(|e| panic!("{e}"));
    let third = match s.build(&sol) {
        Ok(Ok(b)) => b,
        other => panic!("{other:?}"),
    };
    assert!(!third.cached);
    assert_ne!(
        std::fs::read(&third.hit.module).unwrap_or_default(),
        b"not a module"
    );
    let cache = BuildCache::new(dir.path());
    assert_eq!(cache.list().map(|l| l.len()).unwrap_or(0), 1);
    s.shutdown();
}

#[test]
fn a_source_that_does_not_compile_is_a_compile_error_with_the_compilers_message() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut s = session(dir.path());
    let sol = solution("bad", "int add_two(int x) { return x + ; }");
    match s.build(&sol) {
        Ok(Err((Status::CompileError, log))) => {
            assert!(log.contains("ext.cpp"), "{log}");
            assert!(log.contains("error"), "{log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    // Failures are not cached.
    assert_eq!(
        BuildCache::new(dir.path())
            .list()
            .map(|l| l.len())
            .unwrap_or(9),
        0
    );
    s.shutdown();
}
