//! Idle picker against the fake backend: window, thresholds, ties, missing activity, SMI errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use kg_contract::IdlenessBasis;
use kg_gpu::Discovery;
use kg_gpu::fake::{FakeBackend, Scenario};
use kg_gpu::pick::{self, GIB, PickOptions, PickOutcome, exit};

fn scenario(v: serde_json::Value) -> Scenario {
    serde_json::from_value(v).unwrap()
}

fn disc(v: serde_json::Value) -> Discovery {
    Discovery::from_backends(vec![Box::new(FakeBackend::new(scenario(v)).unwrap())])
}

fn s(act: Option<f64>, used_gib: u64, free_gib: u64) -> serde_json::Value {
    serde_json::json!({
        "activity_pct": act,
        "memory_used_bytes": used_gib * GIB,
        "memory_free_bytes": free_gib * GIB,
    })
}

fn dev(uuid: &str, bus: &str, idx: u32, samples: Vec<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({"uuid": uuid, "pci_bus_id": bus, "runtime_index": idx, "samples": samples})
}

fn opts(samples: u32) -> PickOptions {
    PickOptions {
        samples,
        interval: Duration::ZERO,
        ..PickOptions::default()
    }
}

#[test]
fn a_burst_inside_the_window_disqualifies_a_device_that_one_reading_would_pick() {
    // GPU-a looks idle on the first sample but spikes on the 3rd; GPU-b is steadily 1%.
    let d = disc(serde_json::json!({"devices": [
        dev("GPU-a", "0000:01:00.0", 0, vec![s(Some(0.0), 0, 100), s(Some(0.0), 0, 100), s(Some(85.0), 0, 100)]),
        dev("GPU-b", "0000:02:00.0", 1, vec![s(Some(1.0), 0, 100)]),
    ]}));
    let one = pick::pick(&d, &opts(1), &|_| true);
    assert_eq!(one.picked().unwrap().device.uuid, "GPU-a");
    let d = disc(serde_json::json!({"devices": [
        dev("GPU-a", "0000:01:00.0", 0, vec![s(Some(0.0), 0, 100), s(Some(0.0), 0, 100), s(Some(85.0), 0, 100)]),
        dev("GPU-b", "0000:02:00.0", 1, vec![s(Some(1.0), 0, 100)]),
    ]}));
    let r = pick::pick(&d, &opts(3), &|_| true);
    assert_eq!(r.exit_code(), exit::PICKED);
    let p = r.picked().unwrap();
    assert_eq!(p.device.uuid, "GPU-b");
    assert_eq!(p.idleness_basis, IdlenessBasis::ActivityVram);
    let a = r
        .candidates
        .iter()
        .find(|c| c.device.uuid == "GPU-a")
        .unwrap();
    assert!(!a.idle);
    assert_eq!(a.peak_activity_pct, Some(85.0));
    assert!((a.mean_activity_pct.unwrap() - 85.0 / 3.0).abs() < 1e-9);
    assert!(a.reasons[0].contains("peak activity"), "{:?}", a.reasons);
}

#[test]
fn thresholds_on_used_and_free_memory_and_none_idle_exits_1() {
    let d = disc(serde_json::json!({"devices": [
        dev("GPU-used", "0000:01:00.0", 0, vec![s(Some(0.0), 3, 100)]),
        dev("GPU-small", "0000:02:00.0", 1, vec![s(Some(0.0), 0, 15)]),
    ]}));
    let r = pick::pick(&d, &opts(2), &|_| true);
    assert_eq!(r.outcome, PickOutcome::NoneIdle);
    assert_eq!(r.exit_code(), exit::NONE_IDLE);
    assert!(r.picked().is_none());
    let reasons: Vec<String> = r
        .candidates
        .iter()
        .flat_map(|c| c.reasons.clone())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|x| x.contains("used memory 3.00 GiB > 2.00 GiB")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|x| x.contains("free memory 15.00 GiB < 16.00 GiB")),
        "{reasons:?}"
    );
    // Relaxed thresholds make both idle.
    let d = disc(serde_json::json!({"devices": [
        dev("GPU-used", "0000:01:00.0", 0, vec![s(Some(0.0), 3, 100)]),
    ]}));
    let relaxed = PickOptions {
        max_used_bytes: 4 * GIB,
        ..opts(1)
    };
    assert_eq!(
        pick::pick(&d, &relaxed, &|_| true).exit_code(),
        exit::PICKED
    );
}

#[test]
fn sort_key_is_peak_then_mean_then_used_then_more_free_and_full_ties_keep_smi_order() {
    let d = disc(serde_json::json!({"devices": [
        dev("GPU-0", "0000:01:00.0", 0, vec![s(Some(1.0), 1, 100), s(Some(1.0), 1, 100)]),
        dev("GPU-1", "0000:02:00.0", 1, vec![s(Some(1.0), 1, 100), s(Some(0.0), 1, 100)]), // lower mean
        dev("GPU-2", "0000:03:00.0", 2, vec![s(Some(1.0), 0, 100), s(Some(1.0), 0, 100)]), // less used
        dev("GPU-3", "0000:04:00.0", 3, vec![s(Some(1.0), 1, 120), s(Some(1.0), 1, 120)]), // more free
        dev("GPU-4", "0000:05:00.0", 4, vec![s(Some(1.0), 1, 100), s(Some(1.0), 1, 100)]), // tie with 0
    ]}));
    let r = pick::pick(&d, &opts(2), &|_| true);
    let order: Vec<&str> = r
        .candidates
        .iter()
        .map(|c| c.device.uuid.as_str())
        .collect();
    assert_eq!(order, ["GPU-1", "GPU-2", "GPU-3", "GPU-0", "GPU-4"]);
    assert_eq!(r.picked().unwrap().device.runtime_index, Some(1));
}

#[test]
fn missing_activity_is_vram_only_with_null_activity_never_zero() {
    let d = disc(serde_json::json!({"devices": [
        dev("GPU-na", "0000:01:00.0", 0, vec![s(None, 0, 100), s(None, 0, 100)]),
    ]}));
    let r = pick::pick(&d, &opts(2), &|_| true);
    let p = r.picked().unwrap();
    assert_eq!(p.idleness_basis, IdlenessBasis::VramOnly);
    assert_eq!(p.peak_activity_pct, None);
    assert_eq!(p.mean_activity_pct, None);
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["candidates"][0]["peak_activity_pct"].is_null());
    assert_eq!(json["candidates"][0]["idleness_basis"], "vram-only");
    // Activity known in one sample only: still unknown for the window, not a partial peak.
    let d = disc(serde_json::json!({"devices": [
        dev("GPU-mixed", "0000:01:00.0", 0, vec![s(Some(0.0), 0, 100), s(None, 0, 100)]),
    ]}));
    let r = pick::pick(&d, &opts(2), &|_| true);
    assert_eq!(r.candidates[0].idleness_basis, IdlenessBasis::VramOnly);
    // A device measured with activity sorts before one without (more evidence).
    let d = disc(serde_json::json!({"devices": [
        dev("GPU-na", "0000:01:00.0", 0, vec![s(None, 0, 100)]),
        dev("GPU-act", "0000:02:00.0", 1, vec![s(Some(2.0), 0, 100)]),
    ]}));
    assert_eq!(
        pick::pick(&d, &opts(1), &|_| true)
            .picked()
            .unwrap()
            .device
            .uuid,
        "GPU-act"
    );
}

#[test]
fn unknown_memory_is_basis_unknown_and_never_idle() {
    let d = disc(serde_json::json!({"devices": [
        {"uuid": "GPU-x", "pci_bus_id": "0000:01:00.0", "samples": [{"activity_pct": 0.0}]},
    ]}));
    let r = pick::pick(&d, &opts(1), &|_| true);
    assert_eq!(r.candidates[0].idleness_basis, IdlenessBasis::Unknown);
    assert_eq!(r.exit_code(), exit::NONE_IDLE);
}

#[test]
fn smi_errors_exit_2_and_no_device_exits_3() {
    let d = disc(serde_json::json!({"fail": "sample", "devices": [
        dev("GPU-a", "0000:01:00.0", 0, vec![s(Some(0.0), 0, 100)]),
    ]}));
    let r = pick::pick(&d, &opts(1), &|_| true);
    assert!(matches!(r.outcome, PickOutcome::SmiError(ref m) if m.contains("sampling fails")));
    assert_eq!(r.exit_code(), exit::SMI_ERROR);

    // A library that loads but fails init is an SMI error, not "no GPU".
    let path = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(path.path(), r#"{"fail": "init", "devices": []}"#).unwrap();
    let d = Discovery::load(&kg_gpu::BackendSelection::Fake(path.path().to_path_buf()));
    assert_eq!(
        pick::pick(&d, &opts(1), &|_| true).exit_code(),
        exit::SMI_ERROR
    );

    let d = disc(serde_json::json!({"devices": []}));
    assert_eq!(
        pick::pick(&d, &opts(1), &|_| true).exit_code(),
        exit::NO_GPU
    );
    let d = Discovery::load(&kg_gpu::BackendSelection::None);
    assert_eq!(
        pick::pick(&d, &opts(1), &|_| true).exit_code(),
        exit::NO_GPU
    );
}

#[test]
fn missing_vendor_library_is_unavailable_not_a_panic() {
    // CI machines have no libnvidia-ml: loading must report that, not panic.
    let d = Discovery::load(&kg_gpu::BackendSelection::Nvml);
    let st = &d.statuses()[0];
    if st.state == kg_gpu::BackendState::Available {
        return; // a machine with NVIDIA drivers: nothing to check here
    }
    assert_eq!(st.state, kg_gpu::BackendState::Unavailable);
    let reason = st.reason.clone().unwrap();
    assert!(reason.starts_with("backend unavailable: nvml:"), "{reason}");
    assert!(reason.contains("libnvidia-ml"), "{reason}");
}
