use super::*;

fn probe(avail: bool, count: u32) -> ProbeInfo {
    ProbeInfo {
        python: "3.12".into(),
        executable: "python".into(),
        torch: "2.11.0".into(),
        cuda_version: Some("13.0".into()),
        hip_version: None,
        accelerator_available: avail,
        device_count: count,
        device_name: None,
        triton: None,
        numpy: None,
        safetensors: None,
        ninja: None,
    }
}

#[test]
fn parse_requests() {
    assert_eq!(
        "cuda:3".parse::<DeviceRequest>(),
        Ok(DeviceRequest::Cuda(3))
    );
    assert_eq!("rocm".parse::<DeviceRequest>(), Ok(DeviceRequest::Rocm(0)));
    assert!("gpu".parse::<DeviceRequest>().is_err());
    assert!("cuda:x".parse::<DeviceRequest>().is_err());
}

#[test]
fn auto_falls_back_to_cpu_with_a_notice() {
    let (c, notice) = choose(DeviceRequest::Auto, &probe(false, 0)).unwrap();
    assert_eq!(c, DeviceChoice::Cpu);
    assert!(notice.unwrap().contains("CPU"));
    let (c, notice) = choose(DeviceRequest::Auto, &probe(true, 1)).unwrap();
    assert_eq!(c, DeviceChoice::Cuda(0));
    assert!(notice.is_none());
}

#[test]
fn explicit_gpu_without_one_fails() {
    let err = choose(DeviceRequest::Cuda(0), &probe(false, 0)).unwrap_err();
    assert!(err.to_string().contains("--device cpu"), "{err}");
    assert!(choose(DeviceRequest::Cuda(2), &probe(true, 1)).is_err());
}

fn fake_claimer(
    lock_dir: std::path::PathBuf,
) -> impl FnMut(ClaimRequest) -> Result<Claim, ClaimError> {
    move |mut req: ClaimRequest| {
        let scenario = serde_json::json!({"devices": [{
            "uuid": "GPU-fake-0", "pci_bus_id": "0000:01:00.0", "runtime_index": 0,
            "samples": [{"activity_pct": 0.0, "memory_used_bytes": 0,
                         "memory_free_bytes": 100u64 << 30}],
        }]});
        let backend =
            kg_gpu::fake::FakeBackend::new(serde_json::from_value(scenario).unwrap()).unwrap();
        req.lock_dir = lock_dir.clone();
        req.pick.interval = Duration::ZERO;
        Claim::acquire_with(
            kg_gpu::Discovery::from_backends(vec![Box::new(backend)]),
            req,
        )
    }
}

/// `auto` on a machine whose torch sees one GPU, claimed through the fake backend in `dir`.
fn claim_auto(dir: &tempfile::TempDir) -> Acquired {
    acquire_with(
        DeviceRequest::Auto,
        &probe(true, 1),
        &AcquireOptions::default(),
        None,
        fake_claimer(dir.path().to_path_buf()),
    )
    .unwrap()
}

#[test]
fn auto_claims_an_idle_gpu_and_restricts_workers_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let a = claim_auto(&dir);
    assert_eq!(a.choice, DeviceChoice::Cuda(0));
    assert!(a.claim.is_some());
    assert_eq!(a.evidence.as_ref().unwrap().uuid, "GPU-fake-0");
    assert!(
        a.worker_env
            .iter()
            .any(|(k, v)| k == "CUDA_VISIBLE_DEVICES" && v == "GPU-fake-0"),
        "{:?}",
        a.worker_env
    );
    // A second run while the first holds the claim cannot take the device: it falls back to
    // the CPU and says why.
    let b = claim_auto(&dir);
    assert_eq!(b.choice, DeviceChoice::Cpu);
    assert!(b.notice.unwrap().contains("no GPU could be claimed"));
    // With --lock-clocks the same refusal is an error (fail closed), not a CPU fallback.
    let c = acquire_with(
        DeviceRequest::Auto,
        &probe(true, 1),
        &AcquireOptions {
            lock_clocks: true,
            ..AcquireOptions::default()
        },
        None,
        fake_claimer(dir.path().to_path_buf()),
    );
    assert!(matches!(c, Err(DeviceError::Claim(_))));
    drop(a);
    // Released on drop: the device can be claimed again.
    let d = claim_auto(&dir);
    assert_eq!(d.choice, DeviceChoice::Cuda(0));
}

/// A GPU still busy with the previous job's activity when `auto` asks is asked again until
/// it settles, instead of the run falling back to the CPU; one busy throughout is the CPU
/// after `busy_wait`, and any other refusal is final at once.
#[test]
fn auto_waits_for_a_busy_gpu_to_settle_before_falling_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut fake = fake_claimer(dir.path().to_path_buf());
    let mut asked = 0;
    let opts = AcquireOptions {
        busy_wait: Duration::from_secs(30),
        ..AcquireOptions::default()
    };
    let a = acquire_with(DeviceRequest::Auto, &probe(true, 1), &opts, None, |req| {
        asked += 1;
        if asked < 3 {
            return Err(ClaimError::NoneIdle(
                "GPU-fake-0: peak activity 34.0% > 2.0%".into(),
            ));
        }
        fake(req)
    })
    .unwrap();
    assert_eq!(asked, 3);
    assert_eq!(a.choice, DeviceChoice::Cuda(0));
    let n = a.notice.clone().unwrap();
    assert!(
        n.contains("peak activity 34.0%") && n.contains("GPU-fake-0"),
        "{n}"
    );
    drop(a);
    // Busy throughout: the CPU, with the reason, once the wait is over.
    let quick = AcquireOptions {
        busy_wait: Duration::from_millis(50),
        ..AcquireOptions::default()
    };
    let mut asked = 0;
    let b = acquire_with(DeviceRequest::Auto, &probe(true, 1), &quick, None, |_| {
        asked += 1;
        Err(ClaimError::NoneIdle(
            "GPU-fake-0: peak activity 90.0% > 2.0%".into(),
        ))
    })
    .unwrap();
    assert!(asked >= 2, "asked {asked} time(s)");
    assert_eq!(b.choice, DeviceChoice::Cpu);
    assert!(b.notice.unwrap().contains("peak activity 90.0%"));
    // Not a busy GPU (none at all): no waiting.
    let mut asked = 0;
    let c = acquire_with(DeviceRequest::Auto, &probe(true, 1), &opts, None, |_| {
        asked += 1;
        Err(ClaimError::NoGpu("nvml: no devices".into()))
    })
    .unwrap();
    assert_eq!((asked, c.choice), (1, DeviceChoice::Cpu));
}

/// `--gpus all` waits the same way for its first GPU, so a run started right after another
/// GPU job gets its lane instead of an error.
#[test]
fn lanes_wait_for_a_busy_first_gpu_to_settle() {
    let dir = tempfile::tempdir().unwrap();
    let mut fake = fake_claimer(dir.path().to_path_buf());
    let mut asked = 0;
    let (lanes, _) = acquire_lanes_with(
        &GpuSet::All,
        &probe(true, 1),
        &AcquireOptions {
            busy_wait: Duration::from_secs(30),
            ..AcquireOptions::default()
        },
        None,
        |req| {
            asked += 1;
            if asked == 1 {
                return Err(ClaimError::NoneIdle(
                    "GPU-fake-0: peak activity 34.0% > 2.0%".into(),
                ));
            }
            fake(req)
        },
    )
    .unwrap();
    assert_eq!(lanes.len(), 1);
    assert_eq!(lanes[0].evidence.as_ref().unwrap().uuid, "GPU-fake-0");
}

#[test]
fn lock_clocks_without_a_claim_fails_closed() {
    let never = |_: ClaimRequest| -> Result<Claim, ClaimError> {
        Err(ClaimError::NoGpu("must not be called".into()))
    };
    for req in [DeviceRequest::Cpu, DeviceRequest::Cuda(0)] {
        let e = acquire_with(
            req,
            &probe(true, 1),
            &AcquireOptions {
                lock_clocks: true,
                ..AcquireOptions::default()
            },
            None,
            never,
        );
        assert!(matches!(e, Err(DeviceError::ClocksNeedClaim { .. })));
    }
    let e = acquire_with(
        DeviceRequest::Auto,
        &probe(false, 0),
        &AcquireOptions {
            lock_clocks: true,
            ..AcquireOptions::default()
        },
        None,
        never,
    );
    assert!(
        matches!(e, Err(DeviceError::ClocksNeedClaim { .. })),
        "{:?}",
        e.err()
    );
}

#[test]
fn an_enclosing_claim_is_borrowed_not_retaken() {
    // Evidence as an enclosing `kg-gpu claim` would have written it.
    let dir = tempfile::tempdir().unwrap();
    let outer = claim_auto(&dir);
    let ev = outer.evidence.clone().unwrap();
    let called = std::cell::Cell::new(false);
    let a = acquire_with(
        DeviceRequest::Auto,
        &probe(true, 1),
        &AcquireOptions::default(),
        Some(ev.clone()),
        |_| {
            called.set(true);
            Err(ClaimError::NoGpu("x".into()))
        },
    )
    .unwrap();
    assert!(!called.get());
    assert_eq!(a.choice, DeviceChoice::Cuda(0));
    assert_eq!(a.evidence.unwrap().uuid, "GPU-fake-0");
    assert!(a.claim.is_none());
    // The outer claim did not lock clocks, so --lock-clocks cannot be honoured here.
    let e = acquire_with(
        DeviceRequest::Auto,
        &probe(true, 1),
        &AcquireOptions {
            lock_clocks: true,
            ..AcquireOptions::default()
        },
        Some(ev),
        |_| Err(ClaimError::NoGpu("x".into())),
    );
    assert!(matches!(e, Err(DeviceError::ClocksNeedClaim { .. })));
}

/// A claimer over two fake GPUs sharing the lock directory `lock_dir`.
fn two_gpu_claimer(
    lock_dir: std::path::PathBuf,
) -> impl FnMut(ClaimRequest) -> Result<Claim, ClaimError> {
    kg_gpu::fake::idle_claimer(2, lock_dir)
}

fn uuids(lanes: &[Acquired]) -> Vec<String> {
    lanes
        .iter()
        .map(|a| a.evidence.as_ref().unwrap().uuid.clone())
        .collect()
}

fn err_of<T>(r: Result<T, DeviceError>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn gpu_sets_parse() {
    assert_eq!("all".parse::<GpuSet>(), Ok(GpuSet::All));
    assert_eq!("2".parse::<GpuSet>(), Ok(GpuSet::Count(2)));
    assert_eq!(
        "GPU-a, 0000:01:00.0".parse::<GpuSet>(),
        Ok(GpuSet::List(vec!["GPU-a".into(), "0000:01:00.0".into()]))
    );
    assert!("0".parse::<GpuSet>().unwrap_err().contains("--device cpu"));
    assert!(
        "GPU-a,GPU-a"
            .parse::<GpuSet>()
            .unwrap_err()
            .contains("twice")
    );
    assert!(",".parse::<GpuSet>().is_err());
}

#[test]
fn lanes_claim_different_gpus_and_a_third_claim_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let opts = AcquireOptions::default();
    let (lanes, notice) = acquire_lanes_with(
        &GpuSet::Count(2),
        &probe(true, 2),
        &opts,
        None,
        two_gpu_claimer(dir.path().to_path_buf()),
    )
    .unwrap();
    assert!(notice.is_none());
    let mut got = uuids(&lanes);
    got.sort();
    assert_eq!(got, vec!["GPU-fake-0", "GPU-fake-1"]);
    // Each lane's workers see only its own GPU, as index 0.
    for a in &lanes {
        assert_eq!(a.choice, DeviceChoice::Cuda(0));
        let uuid = &a.evidence.as_ref().unwrap().uuid;
        assert!(
            a.worker_env
                .iter()
                .any(|(k, v)| k == "CUDA_VISIBLE_DEVICES" && v == uuid),
            "{:?}",
            a.worker_env
        );
    }
    // Both held: another run asking for one is refused, naming a holder.
    let e = err_of(acquire_lanes_with(
        &GpuSet::Count(1),
        &probe(true, 2),
        &opts,
        None,
        two_gpu_claimer(dir.path().to_path_buf()),
    ));
    assert!(e.contains("only 0 of 1"), "{e}");
    assert!(e.contains("GPU-fake-"), "{e}");
    // `all` while one is held claims the other and says so.
    let mut lanes = lanes;
    let _kept = lanes.pop();
    drop(lanes);
    let (all, notice) = acquire_lanes_with(
        &GpuSet::All,
        &probe(true, 2),
        &opts,
        None,
        two_gpu_claimer(dir.path().to_path_buf()),
    )
    .unwrap();
    assert_eq!(all.len(), 1);
    assert!(notice.unwrap().contains("claimed 1 of the 2"));
}

#[test]
fn lanes_by_name_and_their_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let opts = AcquireOptions::default();
    let (lanes, _) = acquire_lanes_with(
        &GpuSet::List(vec!["GPU-fake-1".into()]),
        &probe(true, 2),
        &opts,
        None,
        two_gpu_claimer(dir.path().to_path_buf()),
    )
    .unwrap();
    assert_eq!(uuids(&lanes), vec!["GPU-fake-1"]);
    let e = err_of(acquire_lanes_with(
        &GpuSet::List(vec!["GPU-fake-1".into()]),
        &probe(true, 2),
        &opts,
        None,
        two_gpu_claimer(dir.path().to_path_buf()),
    ));
    assert!(e.contains("`GPU-fake-1` could not be claimed"), "{e}");
    // No GPU: an error naming the CPU alternative, never a silent CPU run.
    let e = err_of(acquire_lanes_with(
        &GpuSet::All,
        &probe(false, 0),
        &opts,
        None,
        two_gpu_claimer(dir.path().to_path_buf()),
    ));
    assert!(e.contains("--device cpu"), "{e}");
    // Inside an enclosing claim: its one GPU, borrowed; more is refused.
    let ev = lanes[0].evidence.clone().unwrap();
    let (one, _) = acquire_lanes_with(
        &GpuSet::All,
        &probe(true, 1),
        &opts,
        Some(ev.clone()),
        |_| Err(ClaimError::NoGpu("must not be called".into())),
    )
    .unwrap();
    assert_eq!(uuids(&one), vec!["GPU-fake-1"]);
    assert!(one[0].claim.is_none());
    let e = err_of(acquire_lanes_with(
        &GpuSet::Count(2),
        &probe(true, 2),
        &opts,
        Some(ev),
        |_| Err(ClaimError::NoGpu("must not be called".into())),
    ));
    assert!(e.contains("kg-gpu claim"), "{e}");
}
