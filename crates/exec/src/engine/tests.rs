use super::*;

#[test]
fn round_costs_sum_each_kind_of_request_and_the_parts_workers_report() {
    let mut c = RoundCosts::default();
    let t = Instant::now();
    // A batch: the per-round replies' parts and the batch reply's own.
    let rounds = [
        json!({"ms": {"call": 1.5}}),
        json!({"ms": {"call": 0.5, "save": "x"}}),
    ];
    let batch = json!({"ms": {"save": 2.0}});
    c.add(
        "candidate run",
        t,
        rounds.iter().chain(std::iter::once(&batch)),
    );
    c.add("judge check", t, None);
    let line = c.line();
    assert!(line.contains("(call 2.0, save 2.0)"), "{line}");
    assert!(line.starts_with("candidate run "), "{line}");
    assert!(line.contains("; judge check "), "{line}");
    assert!(!line.contains("judge check 0.0 ("), "{line}");
}

#[test]
fn rounds_are_batched_within_the_byte_budget() {
    // A 4096^2 bf16 matmul round: 64 MiB of inputs, twice 32 MiB of output.
    assert_eq!(rounds_fitting(128 << 20), 2);
    assert_eq!(rounds_fitting(ROUND_BATCH_BYTES + 1), 1);
    assert_eq!(rounds_fitting(4096), 65536);
    assert_eq!(
        rounds_fitting(0),
        u32::try_from(ROUND_BATCH_BYTES).unwrap_or(u32::MAX)
    );
}

#[test]
fn overhead_is_counted_beyond_each_sides_timed_loop_or_its_summed_calls() {
    let cand = json!({"notes": {"bracket_ms": {"calls": 30.0}}});
    let reference = json!({"notes": {}});
    let line = overhead_line(100.0, (&cand, 5.0), (&reference, 20.0));
    // 100 - 30 (candidate loop) - 20 (reference: no loop note, its summed calls)
    assert!(line.contains("beyond the timed loops 50.0 ms"), "{line}");
    assert!(
        line.contains("beyond the timed calls' own time 75.0 ms"),
        "{line}"
    );
    assert!(
        line.contains("candidate 30.0 ms, reference 20.0 ms"),
        "{line}"
    );
}

#[test]
fn asked_calls_leave_out_warm_ups_and_the_longer_sides_round_calls() {
    let cand = json!({"notes": {"bracket_ms": {"calls": 5.0}}, "warmup_ms": 4.0});
    let reference = json!({"notes": {"bracket_ms": {"calls": 20.0}}, "warmup_ms": 6.0});
    let mut costs = RoundCosts::default();
    costs.add_ms("candidate run", 12.0, [&json!({"ms": {"call": 3.0}})]);
    costs.add_ms("judge prepare", 11.0, [&json!({"ms": {"reference": 7.0}})]);
    let line = asked_calls_line(100.0, (&cand, 1.0), (&reference, 1.0), &costs);
    // 100 - 5 - 20 (loops) - 4 - 6 (warm-ups) - max(3, 7) (rounds' calls) = 58
    assert!(
        line.ends_with("beyond these and the timed loops 58.0 ms\n"),
        "{line}"
    );
    // no timing notes (the CPU): the summed call times stand for the loops
    let none = RoundCosts::default();
    let line = asked_calls_line(100.0, (&json!({}), 5.0), (&json!({}), 20.0), &none);
    assert!(
        line.ends_with("beyond these and the timed loops 75.0 ms\n"),
        "{line}"
    );
}

#[test]
fn rocm_results_say_what_never_ran_on_amd_hardware() {
    let sol = |lang: &str| -> Solution {
        serde_json::from_value(json!({
            "name": "s", "definition": "d", "author": "t",
            "spec": {"languages": [lang], "target_hardware": ["gfx942"],
                     "entry_point": "k.hip::run"},
            "sources": [{"path": "k.hip", "content": ""}]
        }))
        .unwrap()
    };
    use kg_contract::Unverified::{HipBuild, HipEventTiming};
    let rocm = DeviceChoice::Rocm(0);
    assert_eq!(
        unverified_paths(&rocm, &sol("hip_cpp")),
        vec![HipEventTiming, HipBuild]
    );
    assert_eq!(
        unverified_paths(&rocm, &sol("triton")),
        vec![HipEventTiming]
    );
    assert!(unverified_paths(&DeviceChoice::Cuda(0), &sol("triton")).is_empty());
    assert!(unverified_paths(&DeviceChoice::Cpu, &sol("hip_cpp")).is_empty());
    // CUPTI is NVIDIA's: ROCm's default timing is HIP events.
    assert_eq!(
        EvalOptions::new(rocm).timing_method(),
        TimingMethod::DeviceEventSync
    );
    assert_eq!(
        EvalOptions::new(DeviceChoice::Cuda(0)).timing_method(),
        TimingMethod::Cupti
    );
    assert!(check_languages(&sol("hip_cpp")).is_ok());
}

#[test]
fn dual_clock_allows_a_multiple_of_the_references_unexplained_time() {
    // A batch of 10 CPU calls reported 1 ms in 100 ms of wall time: fixed allowance 25 ms.
    let tr = json!({"outside_ms": 100.0, "dual_clock": {"reported_ms": 1.0, "calls": 10, "extra_ms": 0.0}});
    let quiet_ref = json!({"batch_wall_ms": 12.0});
    let why = dual_clock_after_reference(&tr, &quiet_ref, 10.0, false);
    assert!(
        why.is_some_and(|w| w.contains("dual clock")),
        "the reference explains its batch: a lie"
    );
    // The same batch when the reference's own batch left 30 ms unexplained (a loaded machine).
    let busy_ref = json!({"batch_wall_ms": 40.0});
    assert_eq!(
        dual_clock_after_reference(&tr, &busy_ref, 10.0, false),
        None
    );
    // No reference figure: the fixed allowance alone.
    assert!(dual_clock_after_reference(&tr, &json!({}), 10.0, false).is_some());
    // No dual-clock record (a failed timed phase never gets here): nothing to say.
    assert_eq!(
        dual_clock_after_reference(&json!({}), &busy_ref, 0.0, false),
        None
    );
}

#[test]
fn sol_floor_turns_only_passed_latencies_below_t_sol_into_reward_hack() {
    let mut t = IndexMap::new();
    t.insert(("d".to_string(), "w".to_string()), 0.010);
    let floor = SolFloor {
        t_sol_ms: t,
        source: "sol.jsonl".into(),
    };
    let passed = |latency_ms: f64| Outcome {
        status: Status::Passed,
        reason: None,
        log: "timing log\n".into(),
        correctness: None,
        performance: Some(Performance {
            latency_ms,
            reference_latency_ms: 1.0,
            speedup_factor: 1.0 / latency_ms,
            timing_method: None,
            warmup: None,
            iterations: None,
            spread: None,
            reference_spread: None,
            phases: None,
            reference_reused: None,
        }),
        retry: None,
    };
    let o = floor.check("d", "w", passed(0.004));
    assert_eq!(o.status, Status::RewardHack);
    assert!(o.performance.is_none());
    assert!(o.log.contains("below T_SOL = 0.010000 ms") && o.log.contains("sol.jsonl"));
    assert!(o.log.ends_with("timing log\n"), "the original log is kept");
    let o = floor.check("d", "w", passed(0.010));
    assert_eq!(o.status, Status::Passed);
    assert!(
        o.log.contains("speed-of-light floor: T_SOL = 0.010000 ms"),
        "{}",
        o.log
    );
    assert_eq!(
        floor.check("d", "other", passed(0.004)).status,
        Status::Passed
    );
    assert_eq!(floor.check("e", "w", passed(0.004)).status, Status::Passed);
    let failed = Outcome::fail(Status::IncorrectNumerical, Reason::NumericalMismatch, "x");
    assert_eq!(
        floor.check("d", "w", failed).status,
        Status::IncorrectNumerical
    );
}

fn reply(cupti: Option<&[f64]>, fallback: Option<&str>) -> Value {
    let mut notes = serde_json::Map::new();
    if let Some(c) = cupti {
        notes.insert("cupti_ms".into(), json!(c));
    }
    if let Some(f) = fallback {
        notes.insert("cupti_fallback".into(), json!(f));
    }
    json!({"notes": notes})
}

/// `choose_times` with CUPTI asked for, on these replies and event times.
fn cupti(
    c: &Value,
    r: &Value,
    ce: &[f64],
    re: &[f64],
) -> (TimingMethod, Vec<f64>, Vec<f64>, Option<String>) {
    choose_times(TimingMethod::Cupti, c, r, ce.to_vec(), re.to_vec())
}

#[test]
fn cupti_spans_are_used_only_when_both_sides_have_them() {
    let ev = vec![0.0065, 0.0066, 0.0064];
    let c = reply(Some(&[0.0052, 0.0051, 0.0053]), None);
    let r = reply(Some(&[0.0050, 0.0052, 0.0051]), None);
    let (m, ct, rt, note) = cupti(&c, &r, &ev, &ev);
    assert_eq!(m, TimingMethod::Cupti);
    assert_eq!((ct[0], rt[0]), (0.0052, 0.0050));
    assert!(note.is_none());

    let r_none = reply(None, Some("CUDA activity profiler unavailable: X"));
    let (m, ct, _, note) = cupti(&c, &r_none, &ev, &ev);
    assert_eq!(m, TimingMethod::DeviceEventSync);
    assert_eq!(ct, ev);
    assert!(note.is_some_and(|n| n.contains("reference: CUDA activity profiler unavailable")));
}

#[test]
fn candidate_spans_far_below_its_event_brackets_are_refused() {
    // A candidate that forges tiny CUPTI spans while its bracketed calls take 1 ms.
    let ev = vec![1.0, 1.0, 1.0];
    let c = reply(Some(&[0.001, 0.001, 0.001]), None);
    let r = reply(Some(&[0.9, 0.9, 0.9]), None);
    let (m, ct, _, note) = cupti(&c, &r, &ev, &ev);
    assert_eq!(m, TimingMethod::DeviceEventSync);
    assert_eq!(ct, ev);
    assert!(note.is_some_and(|n| n.contains("far below")));
    // A span count that does not match the timed calls is not used either.
    let short = reply(Some(&[0.9]), None);
    let (m, ..) = cupti(&short, &r, &ev, &ev);
    assert_eq!(m, TimingMethod::DeviceEventSync);
}

#[test]
fn forged_spans_on_a_few_microsecond_kernel_are_refused() {
    // Events 6.5 us (a 5 us add plus the launch gap): honest spans of 5 us pass, spans
    // forged down to 0.1 us do not.
    let ev = vec![0.0065, 0.0066, 0.0064];
    let honest = reply(Some(&[0.0050, 0.0049, 0.0051]), None);
    let forged = reply(Some(&[0.0001, 0.0001, 0.0001]), None);
    let (m, ..) = cupti(&honest, &honest, &ev, &ev);
    assert_eq!(m, TimingMethod::Cupti);
    let (m, ..) = cupti(&forged, &honest, &ev, &ev);
    assert_eq!(m, TimingMethod::DeviceEventSync);
}

#[test]
fn tiny_kernels_are_checked_against_the_references_spans() {
    // H200, a 2 us gemv: both sides' event brackets read ~11 us (session 6's release made
    // such a workload fall back to events in one run and not in the other).
    let ce = vec![0.0112, 0.0113, 0.0111];
    let re = vec![0.0111, 0.0112, 0.0110];
    let honest = reply(Some(&[0.0019, 0.0019, 0.0020]), None);
    let reference = reply(Some(&[0.0019, 0.0020, 0.0019]), None);
    let (m, ct, _, note) = cupti(&honest, &reference, &ce, &re);
    assert_eq!(m, TimingMethod::Cupti);
    assert_eq!(ct, vec![0.0019, 0.0019, 0.0020]);
    assert!(note.is_some_and(|n| n.contains("checked against the reference")));
    // Spans forged to 0.1 us, or to 1.4 us (1.36x over the reference where the events
    // show 1.0x), are not believed.
    for forged in [0.0001, 0.0014] {
        let c = reply(Some(&[forged, forged, forged]), None);
        let (m, ..) = cupti(&c, &reference, &ce, &re);
        assert_eq!(m, TimingMethod::DeviceEventSync, "{forged}");
    }
    // Where the reference's spans are resolved by its events, the candidate's are held to
    // the plain rule.
    let resolved_ref = reply(Some(&[0.0100, 0.0101, 0.0099]), None);
    let (m, ..) = cupti(&honest, &resolved_ref, &ce, &re);
    assert_eq!(m, TimingMethod::DeviceEventSync);
}

#[test]
fn spans_are_checked_against_stream_events_where_measured() {
    // H200, session 7: a 2.1 us embedding gather whose bracket times read 12.8 us (the
    // closing sync's wake-up) while its stream events read about its span.
    let with_stream = |spans: &[f64], stream_ms: f64| {
        let mut v = reply(Some(spans), None);
        v["notes"]["stream_event_median_ms"] = json!(stream_ms);
        v
    };
    let ce = vec![0.0128, 0.0127, 0.0129];
    let re = vec![0.0061, 0.0060, 0.0062];
    let reference = with_stream(&[0.0021, 0.0022, 0.0021], 0.0024);
    let honest = with_stream(&[0.0021, 0.0021, 0.0022], 0.0025);
    let (m, ct, ..) = cupti(&honest, &reference, &ce, &re);
    assert_eq!(m, TimingMethod::Cupti);
    assert_eq!(ct, vec![0.0021, 0.0021, 0.0022]);
    // Without the stream events the same spans are refused, as on the H200.
    let (m, ..) = cupti(
        &reply(Some(&[0.0021, 0.0021, 0.0022]), None),
        &reply(Some(&[0.0021, 0.0022, 0.0021]), None),
        &ce,
        &re,
    );
    assert_eq!(m, TimingMethod::DeviceEventSync);
    // Spans forged to a tenth of a 40 us call the stream events see are refused.
    let forged = with_stream(&[0.004, 0.004, 0.004], 0.040);
    let (m, _, _, note) = cupti(&forged, &reference, &ce, &re);
    assert_eq!(m, TimingMethod::DeviceEventSync);
    assert!(note.is_some_and(|n| n.contains("far below")));
}

#[test]
fn a_kept_reference_timing_serves_only_a_spin_within_a_quarter_of_its_own() {
    use workload::spins_alike;
    assert!(spins_alike(None, None), "the CPU has no spin");
    assert!(spins_alike(Some(600.0), Some(600.0)));
    assert!(spins_alike(Some(480.0), Some(400.0)));
    assert!(
        !spins_alike(Some(600.0), Some(250.0)),
        "a reference timed for a longer launch"
    );
    assert!(
        !spins_alike(Some(250.0), Some(600.0)),
        "a spin too short for this launch"
    );
    assert!(!spins_alike(Some(250.0), None) && !spins_alike(None, Some(250.0)));
    assert!(!spins_alike(Some(250.0), Some(0.0)));
}

#[test]
fn the_spin_follows_the_references_host_launch_within_bounds() {
    assert_eq!(spin_us_for(None), SPIN_MIN_US);
    assert_eq!(spin_us_for(Some(0.010)), SPIN_MIN_US);
    assert_eq!(spin_us_for(Some(0.070)), 280.0);
    assert_eq!(spin_us_for(Some(0.120)), 480.0);
    assert_eq!(spin_us_for(Some(5.0)), SPIN_MAX_US);
    assert_eq!(spin_us_for(Some(f64::NAN)), SPIN_MIN_US);
}

#[test]
fn only_a_reference_whose_launch_outgrows_the_spin_cap_is_called_host_bound() {
    // 4 x 149 us = 596 us fits the cap; 4 x 151 us does not.
    assert_eq!(host_bound_note(Some(0.149)), None);
    let note = host_bound_note(Some(0.151)).unwrap();
    assert!(note.contains("host launch (151 us)"), "{note}");
    assert_eq!(host_bound_note(None), None);
    assert_eq!(host_bound_note(Some(f64::NAN)), None);
}

#[test]
fn other_methods_pass_through() {
    let ev = vec![0.5];
    let c = reply(Some(&[0.1]), None);
    let (m, ct, ..) = choose_times(TimingMethod::CudaGraph, &c, &c, ev.clone(), ev.clone());
    assert_eq!((m, ct), (TimingMethod::CudaGraph, ev));
}

#[test]
fn only_triton_candidates_prepare_triton_as_they_start_and_only_cuda_ones_its_driver() {
    let sol = |lang: &str| -> Solution {
        serde_json::from_value(json!({
            "name": "s", "definition": "d", "author": "t",
            "spec": {"languages": [lang], "target_hardware": ["LOCAL"],
                     "entry_point": "k.py::run"},
            "sources": [{"path": "k.py", "content": ""}]
        }))
        .unwrap()
    };
    let cuda = DeviceChoice::Cuda(0);
    assert_eq!(
        candidate::warm_for(&sol("Triton"), &cuda),
        Some("triton-cuda")
    );
    assert_eq!(
        candidate::warm_for(&sol("triton"), &DeviceChoice::Cpu),
        Some("triton")
    );
    assert_eq!(
        candidate::warm_for(&sol("triton"), &DeviceChoice::Rocm(0)),
        Some("triton")
    );
    assert_eq!(candidate::warm_for(&sol("pytorch"), &cuda), None);
    assert_eq!(candidate::warm_for(&sol("cuda_cpp"), &cuda), None);
}
