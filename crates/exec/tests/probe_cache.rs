//! The interpreter probe's cache: the second probe of an unchanged interpreter is answered
//! from the cache with the same facts, a corrupt entry is probed again, and a change of what
//! decides the devices torch sees (CUDA_VISIBLE_DEVICES) is a miss.

use std::path::PathBuf;

mod support;

#[test]
#[allow(unsafe_code)]
fn a_probe_is_cached_until_what_it_depends_on_changes() {
    let interp = support::interpreter();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (first, cached) = kg_exec::probe_cached(&interp, dir.path())
        .unwrap_or_else(|e| panic!("`{}` cannot import torch: {e}", interp.path.display()));
    assert!(!cached);
    let (second, cached) =
        kg_exec::probe_cached(&interp, dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(cached);
    assert_eq!(first, second);
    // A corrupt entry: probed again, and the entry replaced.
    let bucket = dir.path().join("interpreter-v1");
    let entries: Vec<PathBuf> = std::fs::read_dir(&bucket)
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    assert_eq!(entries.len(), 1);
    std::fs::write(&entries[0], b"{not json").unwrap_or_else(|e| panic!("{e}"));
    let (third, cached) =
        kg_exec::probe_cached(&interp, dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(!cached);
    assert_eq!(third, first);
    // Another device visibility is another key.
    // SAFETY: nextest runs this test alone in its own process; no other thread reads the
    // environment meanwhile.
    unsafe { std::env::set_var("CUDA_VISIBLE_DEVICES", "kg-test-none") };
    let (_, cached) = kg_exec::probe_cached(&interp, dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(!cached);
    assert_eq!(
        std::fs::read_dir(&bucket).map(Iterator::count).unwrap_or(0),
        2
    );
}
