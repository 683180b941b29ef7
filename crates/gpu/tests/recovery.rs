//! Recovery evidence in-process (fake backend): an unverified child cleanup blocks the next
//! claim with a message naming the fix, and `recover` clears it once the group is gone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kg_gpu::fake::{FakeBackend, Scenario};
use kg_gpu::pick::PickOptions;
use kg_gpu::{BackendSelection, Claim, ClaimError, ClaimRequest, Discovery};

const UUID: &str = "GPU-11111111-2222-3333-4444-555555555555";

fn discovery() -> Discovery {
    let scenario: Scenario = serde_json::from_value(serde_json::json!({"devices": [{
        "uuid": UUID, "pci_bus_id": "0000:19:00.0", "runtime_index": 0,
        "memory_total_bytes": 150_000_000_000u64,
        "samples": [{"activity_pct": 0.0, "memory_used_bytes": 0, "memory_free_bytes": 140_000_000_000u64}]
    }]}))
    .unwrap();
    Discovery::from_backends(vec![Box::new(FakeBackend::new(scenario).unwrap())])
}

fn request(dir: &std::path::Path) -> ClaimRequest {
    ClaimRequest {
        backends: BackendSelection::parse("none", None).unwrap(),
        device: None,
        pick: PickOptions {
            samples: 1,
            interval: Duration::ZERO,
            ..PickOptions::default()
        },
        lock_clocks: None,
        require_clock_lock: false,
        lock_dir: dir.to_path_buf(),
        command: vec!["test".into()],
    }
}

#[test]
fn unverified_child_cleanup_blocks_the_next_claim_until_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let mut claim = Claim::acquire_with(discovery(), request(dir.path())).unwrap();
    assert!(
        !claim.recovery_path().exists(),
        "no evidence without clocks"
    );
    // A process group id no process has: recover can verify it is gone.
    claim.mark_cleanup_unverified(i32::MAX - 11, vec![4242]);
    let (_, pending) = claim.finish_keeping_pending();
    assert_eq!(pending.len(), 1);

    let err = Claim::acquire_with(discovery(), request(dir.path()))
        .err()
        .unwrap();
    assert!(matches!(err, ClaimError::RecoveryRequired { .. }), "{err}");
    assert_eq!(err.exit_code(), kg_gpu::claim_exit::RECOVERY);
    let msg = err.to_string();
    assert!(msg.contains("still had members [4242]"), "{msg}");
    assert!(
        msg.contains(&format!("kg-gpu recover --device {UUID}")),
        "{msg}"
    );

    let none = BackendSelection::parse("none", None).unwrap();
    let out = kg_gpu::recovery::recover(dir.path(), UUID, &none, false).unwrap();
    assert!(out.cleared.is_some());
    assert!(out.actions[0].contains("is gone"), "{:?}", out.actions);
    Claim::acquire_with(discovery(), request(dir.path())).unwrap();
}

#[test]
fn a_live_process_group_is_not_cleared_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let mut claim = Claim::acquire_with(discovery(), request(dir.path())).unwrap();
    // Our own group is alive: recovery must refuse to call it cleaned up.
    let me = nix::unistd::getpgrp().as_raw();
    claim.mark_cleanup_unverified(me, vec![std::process::id()]);
    drop(claim);
    let none = BackendSelection::parse("none", None).unwrap();
    let err = kg_gpu::recovery::recover(dir.path(), UUID, &none, false).unwrap_err();
    assert!(matches!(err, ClaimError::RecoveryFailed { .. }), "{err}");
    assert!(kg_gpu::recovery::marker_path(dir.path(), UUID).exists());
    let out = kg_gpu::recovery::recover(dir.path(), UUID, &none, true).unwrap();
    assert!(out.actions[0].contains("--force"), "{:?}", out.actions);
    assert!(!kg_gpu::recovery::marker_path(dir.path(), UUID).exists());
}
