//! `Evaluation::check_nullable`: the upstream rules for which tables each status carries.

use kg_contract::{Correctness, Evaluation, NullableError, Performance, Status};

fn eval(status: Status, correctness: bool, performance: bool) -> Evaluation {
    Evaluation {
        status,
        log: String::new(),
        correctness: correctness.then(|| Correctness {
            max_relative_error: 0.0,
            max_absolute_error: 0.0,
            has_nan: false,
            has_inf: false,
            extra: None,
            min_matched_ratio: None,
            rounds: None,
            checks: None,
        }),
        performance: performance.then_some(Performance {
            latency_ms: 1.0,
            reference_latency_ms: 2.0,
            speedup_factor: 2.0,
            timing_method: None,
            warmup: None,
            iterations: None,
            spread: None,
            reference_spread: None,
            phases: None,
            reference_reused: None,
        }),
        environment: Default::default(),
        timestamp: String::new(),
        wall_s: None,
        retried: None,
        candidate_start: None,
        build: None,
        reason: None,
    }
}

#[test]
fn exactly_the_upstream_combinations_pass() {
    for status in Status::ALL {
        // The one allowed (correctness, performance) combination per status.
        let allowed = match status {
            Status::Passed => (true, true),
            Status::IncorrectNumerical => (true, false),
            _ => (false, false),
        };
        for c in [false, true] {
            for p in [false, true] {
                let result = eval(status, c, p).check_nullable();
                if (c, p) == allowed {
                    assert_eq!(result, Ok(()), "{status} c={c} p={p}");
                } else {
                    let e = result.unwrap_err();
                    // The error names the first offending table.
                    let field = if c != allowed.0 {
                        "correctness"
                    } else {
                        "performance"
                    };
                    assert_eq!(e.field(), field, "{status} c={c} p={p}: {e}");
                    let missing = if field == "correctness" {
                        allowed.0
                    } else {
                        allowed.1
                    };
                    assert_eq!(matches!(e, NullableError::Missing { .. }), missing, "{e}");
                    assert!(e.to_string().contains(status.as_str()), "{e}");
                }
            }
        }
    }
}
