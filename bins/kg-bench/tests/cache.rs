//! `kg-bench cache ls|clean` over a build cache (`KG_CACHE_DIR`) with two entries, one of them
//! unused for ten days.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use kg_exec::build::{BuildCache, BuildKey, Toolchain};

fn kg(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kg-bench"))
        .env("KG_CACHE_DIR", cache)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("kg-bench: {e}"))
}

fn solution(src: &str) -> kg_contract::Solution {
    serde_json::from_value(serde_json::json!({
        "name": format!("sol_{src}"), "definition": "d", "author": "t",
        "spec": {"languages": ["cuda_cpp"], "target_hardware": ["any"],
                 "entry_point": "k.cu::run"},
        "sources": [{"path": "k.cu", "content": src}],
    }))
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn cache_ls_lists_entries_and_clean_removes_the_old_then_the_rest() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let cache = BuildCache::new(dir.path());
    let module = dir.path().join("m.so");
    std::fs::write(&module, vec![7u8; 4096]).unwrap_or_else(|e| panic!("{e}"));
    let t = Toolchain::default();
    let old = BuildKey::of(&solution("a"), &t);
    let new = BuildKey::of(&solution("b"), &t);
    let hit = cache
        .install(&old, &module, "sol_a", 12.5, &t)
        .unwrap_or_else(|e| panic!("{e}"));
    cache
        .install(&new, &module, "sol_b", 3.0, &t)
        .unwrap_or_else(|e| panic!("{e}"));
    let ten_days_ago = SystemTime::now() - Duration::from_secs(10 * 86_400);
    std::fs::File::options()
        .append(true)
        .open(hit.module.with_file_name("entry.json"))
        .and_then(|f| f.set_modified(ten_days_ago))
        .unwrap_or_else(|e| panic!("{e}"));

    let o = kg(dir.path(), &["cache", "ls"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("sol_a") && out.contains("sol_b"), "{out}");
    assert!(out.contains("2 entries"), "{out}");
    let o = kg(dir.path(), &["cache", "ls", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["entries"].as_array().map(Vec::len), Some(2), "{v}");

    let o = kg(dir.path(), &["cache", "clean", "--older-than", "1"]);
    assert_eq!(o.status.code(), Some(0));
    let listed = cache.list().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].entry.as_ref().map(|e| e.solution.clone()).ok(),
        Some("sol_b".to_string())
    );
    let o = kg(dir.path(), &["cache", "clean", "--older-than", "nan"]);
    assert_eq!(o.status.code(), Some(2));
    let o = kg(dir.path(), &["cache", "clean"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(cache.list().unwrap_or_else(|e| panic!("{e}")).is_empty());
}
