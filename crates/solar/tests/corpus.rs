//! FLOPs and fused bytes of every problem in `problems/core`, for both backends, against
//! closed-form formulas written here; plus fail-closed behaviour on unsupported ops.
//!
//! One interpreter start traces everything (importing torch costs seconds).

#![allow(clippy::unwrap_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use kg_contract::{LoadedWorkload, Problem, Workload};
use kg_solar::analysis::{Analysis, analyze_batch};
use kg_solar::{ExtractionPath, SolarError, hardware};
use kg_test_support::{python, workspace};

/// Loads a problem for counting. Workloads are bound without the contract's input-type policy
/// checks, so this test is about counting only (corpus validation is tested elsewhere).
fn load(dir: &Path) -> Problem {
    let def_path = dir.join("definition.json");
    let wl_path = dir.join("workload.jsonl");
    let (definition, _) = kg_contract::load_definition(&def_path).unwrap();
    let mut workloads = Vec::new();
    for (line, w, _) in kg_contract::io::load_jsonl::<Workload>(&wl_path).unwrap() {
        let resolved = kg_contract::shape::resolve(&definition, &w.axes).unwrap();
        workloads.push(LoadedWorkload {
            line,
            workload: w,
            resolved,
        });
    }
    Problem {
        dir: dir.to_path_buf(),
        definition_path: def_path,
        workload_path: wl_path,
        definition,
        workloads,
        warnings: vec![],
    }
}

#[derive(Debug, PartialEq)]
struct Expect {
    tensor: u64,
    tensor_dtype: Option<&'static str>,
    ew: u64,
    red: u64,
    tr: u64,
    fused: u64,
}

/// Closed forms per problem, from the axes (see docs/solar.md for the conventions).
fn expected(name: &str, ax: &IndexMap<String, i64>, backend: ExtractionPath) -> Option<Expect> {
    let a = |k: &str| ax[k] as u64;
    let e = |tensor, tensor_dtype, ew, red, tr, fused| Expect {
        tensor,
        tensor_dtype,
        ew,
        red,
        tr,
        fused,
    };
    Some(match name {
        // y = x @ W^T: exactly 2*M*N*K tensor FLOPs; (MK + NK + MN) * 2 bytes fused.
        n if n.starts_with("gemm_bf16") => {
            let (m, nn, k) = (a("M"), a("N"), a("K"));
            e(
                2 * m * nn * k,
                Some("bfloat16"),
                0,
                0,
                0,
                (m * k + nn * k + m * nn) * 2,
            )
        }
        n if n.starts_with("bmm_bf16") => {
            let (g, q, kv, d) = (a("G"), a("seq_q"), a("seq_kv"), a("head_dim"));
            e(
                2 * g * q * kv * d,
                Some("bfloat16"),
                0,
                0,
                0,
                (g * q * d + g * d * kv + g * q * kv) * 2,
            )
        }
        n if n.starts_with("softmax_") => {
            let rows = a("batch") * a("num_heads") * a("seq_q");
            let nn = rows * a("seq_kv");
            e(0, None, 2 * nn, 2 * nn, nn, 4 * nn)
        }
        n if n.starts_with("rmsnorm_") => {
            let (t, h) = (a("num_tokens"), a("hidden"));
            e(0, None, 3 * t * h + 2 * t, t * h, t, 4 * t * h + 2 * h)
        }
        n if n.starts_with("fused_add_rmsnorm") => {
            let (t, h) = (a("num_tokens"), a("hidden"));
            e(0, None, 4 * t * h + 2 * t + h, t * h, t, 8 * t * h + 2 * h)
        }
        n if n.starts_with("gelu_tanh") => {
            let nn = a("num_tokens") * a("intermediate");
            e(0, None, 8 * nn, 0, nn, 4 * nn)
        }
        n if n.starts_with("layernorm_") => {
            let (t, h) = (a("num_tokens"), a("hidden"));
            e(0, None, 5 * t * h + 3 * t, 2 * t * h, t, 4 * t * h + 4 * h)
        }
        n if n.starts_with("mean_pool") => {
            let (b, s, h) = (a("batch"), a("seq_len"), a("hidden"));
            e(0, None, b * h, b * s * h, 0, 4 * b * s * h + 4 * b * h)
        }
        n if n.starts_with("moe_topk") => {
            let (t, ex, k) = (a("num_tokens"), a("num_experts"), a("top_k"));
            e(
                0,
                None,
                2 * t * ex + t * k,
                3 * t * ex + t * k,
                t * ex,
                4 * t * ex + 8 * t * k,
            )
        }
        n if n.starts_with("permute_copy") => {
            let nn = a("batch") * a("seq_len") * a("hidden");
            e(0, None, 0, 0, 0, 4 * nn)
        }
        n if n.starts_with("rope_") => {
            let (t, d, heads) = (
                a("num_tokens"),
                a("head_dim"),
                a("num_q_heads") + a("num_kv_heads"),
            );
            // x1*c - x2*s and x2*c + x1*s: 3 ops per element of q and k; cos/sin fp32 read once.
            e(
                0,
                None,
                3 * t * heads * d,
                0,
                0,
                4 * t * heads * d + 4 * t * d,
            )
        }
        n if n.starts_with("silu_and_mul") => {
            let ti = a("num_tokens") * a("intermediate");
            e(0, None, 4 * ti, 0, ti, 6 * ti)
        }
        n if n.starts_with("fp8_quant_group128") => {
            let (t, h, g) = (a("num_tokens"), a("hidden"), a("num_groups"));
            e(
                0,
                None,
                4 * t * h + 2 * t * g,
                t * h,
                0,
                3 * t * h + 4 * t * g,
            )
        }
        n if n.starts_with("fp8_dequant_block128") => {
            let nk = a("N") * a("K");
            e(
                0,
                None,
                nk,
                0,
                0,
                3 * nk + 4 * a("n_blocks") * a("k_blocks"),
            )
        }
        n if n.starts_with("attention_prefill") => {
            // The reference computes QK^T and PV in fp32 over the full (masked) square.
            let (b, s, hq, hk, d) = (
                a("batch"),
                a("seq_len"),
                a("num_qo_heads"),
                a("num_kv_heads"),
                a("head_dim"),
            );
            let sc = b * hq * s * s;
            e(
                4 * sc * d,
                Some("float32"),
                4 * sc + s * s,
                2 * sc,
                sc,
                2 * b * s * d * (hq + 2 * hk) + 2 * b * s * hq * d,
            )
        }
        n if n.starts_with("attention_decode") => {
            let (b, l, hq, hk, d) = (
                a("batch_size"),
                a("max_kv_len"),
                a("num_qo_heads"),
                a("num_kv_heads"),
                a("head_dim"),
            );
            let sc = b * hq * l;
            // ATen lowers the P.V einsum over a size-1 `l` to a broadcast multiply.
            let (tensor, mul) = if backend == ExtractionPath::Aten && l == 1 {
                (2 * sc * d, sc * d)
            } else {
                (4 * sc * d, 0)
            };
            e(
                tensor,
                Some("float32"),
                4 * sc + 2 * b * l + mul,
                2 * sc,
                sc,
                2 * b * hq * d + 4 * b * l * hk * d + 4 * b + 2 * b * hq * d,
            )
        }
        n if n.starts_with("embedding_") => {
            let (t, v, h) = (a("num_tokens"), a("vocab_size"), a("hidden"));
            // Only the looked-up rows of the table move, never the whole table.
            e(0, None, 0, 0, 0, 8 * t + 4 * (t * h).min(v * h) + 4 * t * h)
        }
        n if n.starts_with("cross_entropy") => {
            let (t, v) = (a("num_tokens"), a("vocab_size"));
            e(
                0,
                None,
                t * v + 5 * t,
                2 * t * v,
                t * v + t,
                2 * t * v + 8 * t + 4 * t,
            )
        }
        _ => return None,
    })
}

fn got(a: &Analysis) -> Expect {
    let t = &a.record.totals;
    let dt = t.tensor_flops.keys().next().map(|k| match k.as_str() {
        "bfloat16" => "bfloat16",
        "float32" => "float32",
        "float16" => "float16",
        _ => "other",
    });
    Expect {
        tensor: t.tensor_flops_total(),
        tensor_dtype: dt,
        ew: t.elementwise_flops,
        red: t.reduction_flops,
        tr: t.transcendental_flops,
        fused: t.bytes_fused,
    }
}

#[test]
fn corpus_counts_match_closed_forms_on_both_backends() {
    let py = python();
    let root = workspace().join("problems/core");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("definition.json").is_file())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= 16,
        "expected >= 16 problems in {}",
        root.display()
    );
    let problems: Vec<Problem> = dirs.iter().map(|d| load(d)).collect();
    let mut items = Vec::new();
    for p in &problems {
        assert!(
            expected(
                &p.definition.name,
                &p.workloads[0].resolved.axes,
                ExtractionPath::Fx
            )
            .is_some(),
            "problem `{}` has no closed-form formula in this test; add one",
            p.definition.name
        );
        // Smallest and largest workload of each problem, both backends.
        let last = p.workloads.len() - 1;
        for i in [0, last] {
            for b in [ExtractionPath::Aten, ExtractionPath::Fx] {
                items.push((p, i, b));
            }
        }
    }
    let hw = hardware::load("h200").unwrap();
    let results = analyze_batch(&items, &py, &hw).unwrap();
    let mut failures = Vec::new();
    for ((p, i, b), r) in items.iter().zip(results) {
        let axes = &p.workloads[*i].resolved.axes;
        let want = expected(&p.definition.name, axes, *b).unwrap();
        match r {
            Ok(a) => {
                let g = got(&a);
                if g != want {
                    failures.push(format!(
                        "{} [{b}] {axes:?}:\n  got  {g:?}\n  want {want:?}",
                        p.definition.name
                    ));
                }
                let rec = &a.record;
                assert!(rec.t_sol_ms >= rec.t_compute_ms && rec.t_sol_ms >= rec.t_memory_fused_ms);
            }
            Err(e) => failures.push(format!("{} [{b}] {axes:?}: {e}", p.definition.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn unsupported_ops_fail_closed_listing_every_one() {
    let py = python();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unsupported_ops");
    let p = Problem::load(&dir).unwrap();
    let hw = hardware::load("h200").unwrap();
    let items = [(&p, 0, ExtractionPath::Aten), (&p, 0, ExtractionPath::Fx)];
    for ((_, _, b), r) in items.iter().zip(analyze_batch(&items, &py, &hw).unwrap()) {
        let err = match r {
            Err(e) => e,
            Ok(a) => panic!("[{b}] analysis succeeded with {:?}", a.record.totals),
        };
        let SolarError::Lower { source, .. } = &err else {
            panic!("[{b}] wrong error: {err}");
        };
        let kg_solar::rules::LowerError::Unsupported(list) = source.as_ref() else {
            panic!("[{b}] wrong error: {err}");
        };
        let text = err.to_string();
        assert!(text.contains("fft"), "[{b}] {text}");
        assert!(text.contains("bessel_j0"), "[{b}] {text}");
        // Every entry names its source line in the reference.
        assert!(
            list.iter().all(|u| u
                .loc
                .as_deref()
                .is_some_and(|l| l.starts_with("reference.py:"))),
            "[{b}] {text}"
        );
        assert!(list.len() >= 2, "[{b}] {text}");
    }
}
