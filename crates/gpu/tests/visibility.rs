//! A claim never takes a GPU this process's visibility variables hide: under Slurm,
//! `CUDA_VISIBLE_DEVICES` names the job's GPUs, and an idle-looking GPU of another job is not
//! ours.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kg_gpu::fake::FakeBackend;
use kg_gpu::pick::PickOptions;
use kg_gpu::{BackendSelection, Claim, ClaimRequest, Discovery};

fn discovery(hidden_first: bool) -> Discovery {
    let idle = serde_json::json!([{"activity_pct": 0.0, "memory_used_bytes": 0,
                                   "memory_free_bytes": 100u64 << 30}]);
    let busy = serde_json::json!([{"activity_pct": 40.0, "memory_used_bytes": 0,
                                   "memory_free_bytes": 100u64 << 30}]);
    // GPU-a (idle) belongs to another job when hidden; GPU-b is ours but was busy a moment.
    let scenario = serde_json::json!({"devices": [
        {"uuid": "GPU-a", "pci_bus_id": "0000:01:00.0", "runtime_index": 0,
         "hidden": hidden_first, "samples": idle},
        {"uuid": "GPU-b", "pci_bus_id": "0000:02:00.0", "runtime_index": 1,
         "samples": busy},
        {"uuid": "GPU-c", "pci_bus_id": "0000:03:00.0", "runtime_index": 2,
         "samples": idle},
    ]});
    let backend = FakeBackend::new(serde_json::from_value(scenario).unwrap()).unwrap();
    Discovery::from_backends(vec![Box::new(backend)])
}

fn request(dir: &std::path::Path, device: Option<&str>) -> ClaimRequest {
    ClaimRequest {
        backends: BackendSelection::Auto,
        device: device.map(Into::into),
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
fn a_hidden_gpu_is_never_claimed_even_when_it_is_the_idlest() {
    let tmp = tempfile::tempdir().unwrap();
    // Visible: the first idle GPU is taken.
    let c = Claim::acquire_with(discovery(false), request(tmp.path(), None)).unwrap();
    assert_eq!(c.evidence().uuid, "GPU-a");
    drop(c);
    // Hidden: the other idle GPU, never GPU-a.
    let c = Claim::acquire_with(discovery(true), request(tmp.path(), None)).unwrap();
    assert_eq!(c.evidence().uuid, "GPU-c");
    drop(c);
    // Named explicitly, a hidden GPU is still refused.
    let Err(e) = Claim::acquire_with(discovery(true), request(tmp.path(), Some("GPU-a"))) else {
        panic!("claimed a GPU hidden from this process");
    };
    let e = e.to_string();
    assert!(
        e.contains("hidden from this process") && e.contains("GPU-a"),
        "{e}"
    );
}
