//! From traces to what a report shows: rows, device groups, geomeans.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use kg_contract::{Layer, Spread, Status, TimingMethod, Trace};
use kg_solar::hardware::{BUILTIN, HardwareSpec, LoadedSpec};

use crate::ReportError;
use crate::load::{Entry, Loaded, SummaryHead};

/// The snake_case spelling of a timing method, as traces write it.
pub fn timing_str(m: TimingMethod) -> &'static str {
    match m {
        TimingMethod::CpuWall => "cpu_wall",
        TimingMethod::DeviceEventSync => "device_event_sync",
        TimingMethod::Cupti => "cupti",
        TimingMethod::CudaGraph => "cuda_graph",
    }
}

/// kg-solar's counts for one workload, independent of the device.
#[derive(Debug, Clone, PartialEq)]
pub struct SolEntry {
    /// Tensor-core FLOPs by dtype name.
    pub tensor_flops: IndexMap<String, u64>,
    /// Elementwise, reduction and transcendental FLOPs.
    pub other_flops: u64,
    /// Bytes when only graph inputs and outputs move (kg-solar's fused model).
    pub bytes_fused: u64,
}

impl SolEntry {
    /// All FLOPs.
    pub fn flops(&self) -> f64 {
        (self.tensor_flops.values().sum::<u64>() + self.other_flops) as f64
    }

    /// FLOPs per fused byte; `None` when nothing moves.
    pub fn intensity(&self) -> Option<f64> {
        (self.bytes_fused > 0).then(|| self.flops() / self.bytes_fused as f64)
    }

    /// T_SOL on `spec` in ms, by kg-solar's rule (`max(T_compute, T_memory_fused)`), computed
    /// here from the totals because the analysis may have been priced on another device.
    pub fn t_sol_ms(&self, spec: &HardwareSpec) -> Option<f64> {
        let mut compute_s = self.other_flops as f64 / (spec.vector_fp32_tflops.value * 1e12);
        for (dt, flops) in &self.tensor_flops {
            let (tflops, _) = spec.tensor_peak(kg_contract::DType::parse(dt)?).ok()?;
            compute_s += *flops as f64 / (tflops * 1e12);
        }
        let memory_s = self.bytes_fused as f64 / (spec.hbm_bandwidth_gbps.value * 1e9);
        Some(compute_s.max(memory_s) * 1e3)
    }
}

/// kg-solar counts by (definition, workload uuid).
#[derive(Debug, Clone, Default)]
pub struct SolTable {
    map: HashMap<(String, String), SolEntry>,
}

fn analysis_dirs(root: &Path, out: &mut Vec<PathBuf>) -> Result<(), ReportError> {
    if root.join(kg_solar::analysis::MANIFEST_FILE).is_file() {
        out.push(root.to_path_buf());
        return Ok(());
    }
    let io = |source| ReportError::Io {
        path: root.to_path_buf(),
        source,
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    paths.sort();
    for p in paths.into_iter().filter(|p| p.is_dir()) {
        analysis_dirs(&p, out)?;
    }
    Ok(())
}

impl SolTable {
    /// Reads every analysis below `dir` (`kg-bench solar analyze -o DIR`), each re-hashed
    /// against its manifest.
    pub fn load(dir: &Path) -> Result<SolTable, ReportError> {
        let mut dirs = Vec::new();
        analysis_dirs(dir, &mut dirs)?;
        let mut t = SolTable::default();
        for d in dirs {
            let (_, rec) = kg_solar::analysis::read_verified(&d)?;
            t.insert(
                &rec.definition,
                &rec.workload,
                SolEntry {
                    other_flops: rec.totals.other_flops(),
                    tensor_flops: rec.totals.tensor_flops,
                    bytes_fused: rec.totals.bytes_fused,
                },
            );
        }
        Ok(t)
    }

    /// Adds (or replaces) one workload's counts.
    pub fn insert(&mut self, definition: &str, workload: &str, e: SolEntry) {
        self.map
            .insert((definition.to_string(), workload.to_string()), e);
    }

    /// The counts of one workload.
    pub fn get(&self, definition: &str, workload: &str) -> Option<&SolEntry> {
        self.map
            .get(&(definition.to_string(), workload.to_string()))
    }

    /// How many workloads it covers.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it covers none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// What a report is built with besides the traces.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// FLOPs and bytes per workload; without them there is no roofline and no fraction of SOL.
    pub sol: Option<SolTable>,
    /// The spec for every device; without it each device gets the built-in spec its name names
    /// (`NVIDIA H200` → `h200`), if any.
    pub hardware: Option<LoadedSpec>,
    /// The inputs as given, for the header.
    pub inputs: Vec<String>,
}

/// One trace, as a table row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// HTML id, `row-N`; roofline points link here.
    pub id: String,
    /// Problem key.
    pub key: String,
    /// Definition name.
    pub definition: String,
    /// Solution name.
    pub solution: String,
    /// Workload uuid.
    pub workload: String,
    /// Axes, `name=value` joined by spaces.
    pub axes: String,
    /// Status.
    pub status: Status,
    /// Machine-readable reason codes: the status for a failure, `retried:<reason>` for a
    /// second attempt.
    pub reasons: Vec<String>,
    /// First line of the log that says something, for a failure.
    pub reason: String,
    /// Index into [`Report::devices`].
    pub device: usize,
    /// How it was timed.
    pub timing: Option<TimingMethod>,
    /// Candidate median (ms).
    pub latency_ms: Option<f64>,
    /// Candidate spread.
    pub spread: Option<Spread>,
    /// Reference median (ms).
    pub ref_latency_ms: Option<f64>,
    /// Reference spread.
    pub ref_spread: Option<Spread>,
    /// Reference / candidate.
    pub speedup: Option<f64>,
    /// kg-solar counts, when the SOL table has the workload.
    pub sol: Option<SolEntry>,
    /// T_SOL on this row's device spec (ms).
    pub t_sol_ms: Option<f64>,
    /// `t_sol_ms / latency_ms`: 1 is the speed of light.
    pub frac_sol: Option<f64>,
    /// Harness wall time for the workload (s).
    pub wall_s: Option<f64>,
    /// Where the trace is: `file:line`.
    pub source: String,
}

impl Row {
    /// Achieved FLOP/s, for a passed row with SOL counts.
    pub fn flops_per_s(&self) -> Option<f64> {
        let s = self.latency_ms? / 1e3;
        (s > 0.0).then(|| self.sol.as_ref().map(|e| e.flops() / s))?
    }

    /// Achieved bytes/s (fused model).
    pub fn bytes_per_s(&self) -> Option<f64> {
        let s = self.latency_ms? / 1e3;
        (s > 0.0).then(|| self.sol.as_ref().map(|e| e.bytes_fused as f64 / s))?
    }

    /// Whether the row is a point on the roofline: passed, timed, with nonzero FLOPs and bytes.
    pub fn on_roofline(&self) -> bool {
        self.status == Status::Passed
            && self.flops_per_s().is_some_and(|f| f > 0.0)
            && self.sol.as_ref().and_then(SolEntry::intensity).is_some()
    }
}

/// How often one sandbox layer held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LayerCount {
    /// Traces where it held.
    pub held: usize,
    /// Traces that recorded it.
    pub seen: usize,
}

/// Everything the traces say about one device.
#[derive(Debug, Clone)]
pub struct DeviceGroup {
    /// `cpu`, `cuda` or `rocm`.
    pub kind: String,
    /// Device name (marketing or CPU model).
    pub name: String,
    /// UUID where known.
    pub uuid: Option<String>,
    /// Architecture where known.
    pub arch: Option<String>,
    /// `environment.hardware` values.
    pub hardware: BTreeSet<String>,
    /// Host names.
    pub hosts: BTreeSet<String>,
    /// Library versions (driver, torch, triton, ...): name → versions seen.
    pub libs: BTreeMap<String, BTreeSet<String>>,
    /// Clock states seen, described (`locked sm 1980 MHz mem 3201 MHz`).
    pub clocks: BTreeSet<String>,
    /// Whether every trace had locked clocks.
    pub clocks_locked: bool,
    /// Timing methods of its passed traces.
    pub timing: BTreeSet<&'static str>,
    /// kernelgate versions that wrote the traces.
    pub versions: BTreeSet<String>,
    /// Traces run with the sandbox on / off.
    pub sandboxed: (usize, usize),
    /// Per layer, how often it held.
    pub layers: IndexMap<Layer, LayerCount>,
    /// The hardware spec the roofs and T_SOL come from.
    pub spec: Option<LoadedSpec>,
    /// Why there is no spec, or where it came from.
    pub spec_note: String,
    /// Traces of this device.
    pub traces: usize,
}

impl DeviceGroup {
    /// `kind: name`.
    pub fn label(&self) -> String {
        format!("{}: {}", self.kind, self.name)
    }
}

/// Geometric-mean speedup of one (problem, solution) pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Geomean {
    /// Problem key.
    pub key: String,
    /// Solution.
    pub solution: String,
    /// Workloads.
    pub total: usize,
    /// Passed workloads with a speedup.
    pub passed: usize,
    /// Over the passed ones; `None` when none passed.
    pub geomean: Option<f64>,
}

/// What a trace file's chain manifest binds: problem and solution hashes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hashes {
    /// Problem key.
    pub key: String,
    /// Solution.
    pub solution: String,
    /// Tree hash of the problem directory.
    pub problem_tree_sha256: String,
    /// SHA-256 of the solution's canonical JSON.
    pub solution_sha256: String,
}

/// A report's content, ready to render.
#[derive(Debug, Clone)]
pub struct Report {
    /// One row per trace.
    pub rows: Vec<Row>,
    /// Devices, in order of first appearance.
    pub devices: Vec<DeviceGroup>,
    /// Per (problem, solution).
    pub geomeans: Vec<Geomean>,
    /// Hashes bound by the chains (unchained traces have none).
    pub hashes: BTreeSet<Hashes>,
    /// Traces without a chain record.
    pub unchained: usize,
    /// Each run directory's summary.
    pub summaries: Vec<(PathBuf, SummaryHead)>,
    /// The inputs as given.
    pub inputs: Vec<String>,
    /// Whether FLOPs/bytes were given at all.
    pub has_sol: bool,
    /// Warnings from loading.
    pub warnings: Vec<String>,
}

/// The first line of a log that says something, at most 160 characters.
pub fn first_line(s: &str) -> String {
    let l = s
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with("---"))
        .unwrap_or("");
    let mut out: String = l.chars().take(160).collect();
    if l.chars().count() > 160 {
        out.push('…');
    }
    out
}

/// The built-in spec a device's names name: a spec's short name (`h200`) as one word of the
/// device name or `environment.hardware`.
pub fn builtin_spec_for(names: &[&str]) -> Option<LoadedSpec> {
    let words: BTreeSet<String> = names
        .iter()
        .flat_map(|n| {
            n.to_ascii_lowercase()
                .split(|c: char| !c.is_ascii_alphanumeric())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    BUILTIN
        .iter()
        .find(|(n, _)| words.contains(*n))
        .and_then(|(n, _)| kg_solar::hardware::load(n).ok())
}

fn device_key(t: &Trace) -> (String, String, Option<String>) {
    let env = t.evaluation.as_ref().map(|e| &e.environment);
    match env.and_then(|e| e.device.as_ref()) {
        Some(d) => (d.kind.clone(), d.name.clone(), d.uuid.clone()),
        None => (
            "unknown".into(),
            env.map_or_else(|| "not evaluated".into(), |e| e.hardware.clone()),
            None,
        ),
    }
}

fn new_group(t: &Trace, opts: &ReportOptions) -> DeviceGroup {
    let (kind, name, uuid) = device_key(t);
    let env = t.evaluation.as_ref().map(|e| &e.environment);
    let hardware = env.map(|e| e.hardware.clone()).unwrap_or_default();
    let (spec, spec_note) = match &opts.hardware {
        Some(s) => (Some(s.clone()), format!("{} (given)", s.origin)),
        None => match builtin_spec_for(&[&name, &hardware]) {
            Some(s) => {
                let note = format!("{} (matched by name)", s.origin);
                (Some(s), note)
            }
            None => (
                None,
                format!(
                    "no built-in spec names this device ({}); pass --hardware FILE for roofs and fraction of SOL",
                    BUILTIN.map(|(n, _)| n).join(", ")
                ),
            ),
        },
    };
    DeviceGroup {
        kind,
        name,
        uuid,
        arch: env
            .and_then(|e| e.device.as_ref())
            .and_then(|d| d.arch.clone()),
        hardware: BTreeSet::new(),
        hosts: BTreeSet::new(),
        libs: BTreeMap::new(),
        clocks: BTreeSet::new(),
        clocks_locked: true,
        timing: BTreeSet::new(),
        versions: BTreeSet::new(),
        sandboxed: (0, 0),
        layers: IndexMap::new(),
        spec,
        spec_note,
        traces: 0,
    }
}

fn describe_clocks(c: Option<&kg_contract::ClockState>) -> String {
    let Some(c) = c else {
        return "not recorded".into();
    };
    let mut s = if c.locked { "locked" } else { "not locked" }.to_string();
    if let Some(m) = c.sm_mhz {
        s.push_str(&format!(", SM {m} MHz"));
    }
    if let Some(m) = c.mem_mhz {
        s.push_str(&format!(", memory {m} MHz"));
    }
    if let Some(r) = &c.reason {
        s.push_str(&format!(" ({r})"));
    }
    s
}

fn absorb(g: &mut DeviceGroup, t: &Trace) {
    g.traces += 1;
    let Some(e) = &t.evaluation else {
        g.clocks_locked = false;
        return;
    };
    let env = &e.environment;
    g.hardware.insert(env.hardware.clone());
    if let Some(h) = &env.host {
        g.hosts.insert(h.clone());
    }
    for (k, v) in &env.libs {
        g.libs.entry(k.clone()).or_default().insert(v.clone());
    }
    g.clocks.insert(describe_clocks(env.clocks.as_ref()));
    g.clocks_locked &= env.clocks.as_ref().is_some_and(|c| c.locked);
    if let Some(m) = e.performance.as_ref().and_then(|p| p.timing_method) {
        g.timing.insert(timing_str(m));
    }
    if let Some(v) = &env.kernelgate_version {
        g.versions.insert(v.clone());
    }
    if let Some(iso) = &env.isolation {
        if iso.sandboxed {
            g.sandboxed.0 += 1;
        } else {
            g.sandboxed.1 += 1;
        }
        for l in &iso.layers {
            let c = g.layers.entry(l.layer).or_default();
            c.seen += 1;
            c.held += usize::from(l.held);
        }
    }
}

fn geomean(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let (mut sum, mut n) = (0.0, 0usize);
    for x in xs.filter(|x| x.is_finite() && *x > 0.0) {
        sum += x.ln();
        n += 1;
    }
    (n > 0).then(|| (sum / n as f64).exp())
}

/// Geometric mean of the positive, finite values; `None` when there are none.
pub fn geomean_of(xs: &[f64]) -> Option<f64> {
    geomean(xs.iter().copied())
}

impl Report {
    /// Builds the report from loaded traces.
    pub fn build(loaded: Loaded, opts: &ReportOptions) -> Report {
        let mut devices: Vec<DeviceGroup> = Vec::new();
        let mut device_index: HashMap<(String, String, Option<String>), usize> = HashMap::new();
        let mut rows = Vec::new();
        let mut hashes = BTreeSet::new();
        let mut unchained = 0;
        for (
            i,
            Entry {
                key,
                file,
                line,
                trace,
            },
        ) in loaded.entries.into_iter().enumerate()
        {
            let dk = device_key(&trace);
            let device = *device_index.entry(dk).or_insert_with(|| {
                devices.push(new_group(&trace, opts));
                devices.len() - 1
            });
            absorb(&mut devices[device], &trace);
            match &trace.kernelgate_chain {
                Some(c) => {
                    hashes.insert(Hashes {
                        key: key.clone(),
                        solution: c.manifest.solution.clone(),
                        problem_tree_sha256: c.manifest.problem_tree_sha256.clone(),
                        solution_sha256: c.manifest.solution_sha256.clone(),
                    });
                }
                None => unchained += 1,
            }
            let eval = trace.evaluation.as_ref();
            let perf = eval.and_then(|e| e.performance.as_ref());
            let status = eval.map_or(Status::RuntimeError, |e| e.status);
            let mut reasons = Vec::new();
            let mut reason = String::new();
            match eval {
                None => {
                    reasons.push("NOT_EVALUATED".to_string());
                    reason = "the trace has no evaluation".into();
                }
                Some(e) => {
                    if e.status != Status::Passed {
                        reasons.push(e.status.as_str().to_string());
                        reason = first_line(&e.log);
                    }
                    if let Some(r) = &e.retried {
                        reasons.push(format!("retried:{}", r.reason.as_str()));
                    }
                }
            }
            let sol = opts
                .sol
                .as_ref()
                .and_then(|s| s.get(&trace.definition, &trace.workload.uuid))
                .cloned();
            let latency_ms = perf.map(|p| p.latency_ms).filter(|l| *l > 0.0);
            let t_sol_ms = match (&sol, &devices[device].spec) {
                (Some(s), Some(spec)) => s.t_sol_ms(&spec.spec),
                _ => None,
            };
            let frac_sol = match (t_sol_ms, latency_ms) {
                (Some(t), Some(l)) if status == Status::Passed => Some(t / l),
                _ => None,
            };
            rows.push(Row {
                id: format!("row-{i}"),
                key,
                definition: trace.definition.clone(),
                solution: trace.solution.clone().unwrap_or_default(),
                workload: trace.workload.uuid.clone(),
                axes: trace
                    .workload
                    .axes
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                status,
                reasons,
                reason,
                device,
                timing: perf.and_then(|p| p.timing_method),
                latency_ms,
                spread: perf.and_then(|p| p.spread.clone()),
                ref_latency_ms: perf.map(|p| p.reference_latency_ms).filter(|l| *l > 0.0),
                ref_spread: perf.and_then(|p| p.reference_spread.clone()),
                speedup: perf.map(|p| p.speedup_factor).filter(|s| *s > 0.0),
                sol,
                t_sol_ms,
                frac_sol,
                wall_s: eval.and_then(|e| e.wall_s),
                source: format!("{}:{line}", file.display()),
            });
        }
        let mut pairs: IndexMap<(String, String), Vec<&Row>> = IndexMap::new();
        for r in &rows {
            pairs
                .entry((r.key.clone(), r.solution.clone()))
                .or_default()
                .push(r);
        }
        let geomeans = pairs
            .into_iter()
            .map(|((key, solution), rs)| {
                let passed: Vec<f64> = rs
                    .iter()
                    .filter(|r| r.status == Status::Passed)
                    .filter_map(|r| r.speedup)
                    .collect();
                Geomean {
                    key,
                    solution,
                    total: rs.len(),
                    passed: passed.len(),
                    geomean: geomean_of(&passed),
                }
            })
            .collect();
        Report {
            rows,
            devices,
            geomeans,
            hashes,
            unchained,
            summaries: loaded.summaries,
            inputs: opts.inputs.clone(),
            has_sol: opts.sol.is_some(),
            warnings: loaded.warnings,
        }
    }

    /// Geomean speedup over every passed row.
    pub fn overall_geomean(&self) -> Option<f64> {
        geomean(
            self.rows
                .iter()
                .filter(|r| r.status == Status::Passed)
                .filter_map(|r| r.speedup),
        )
    }

    /// Rows counted per status.
    pub fn status_counts(&self) -> IndexMap<Status, usize> {
        let mut m = IndexMap::new();
        for r in &self.rows {
            *m.entry(r.status).or_insert(0) += 1;
        }
        m
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn built_in_specs_are_found_by_a_word_of_the_device_name() {
        assert_eq!(
            builtin_spec_for(&["NVIDIA H200", "NVIDIA_H200"])
                .unwrap()
                .spec
                .name,
            "h200"
        );
        assert_eq!(
            builtin_spec_for(&["AMD Instinct MI300X"])
                .unwrap()
                .spec
                .name,
            "mi300x"
        );
        assert!(builtin_spec_for(&["AMD EPYC", "CPU"]).is_none());
        // A word, not a substring: an H2000 is no H200.
        assert!(builtin_spec_for(&["Acme H2000"]).is_none());
    }

    #[test]
    fn t_sol_is_the_larger_of_compute_and_fused_memory_time() {
        let h200 = kg_solar::hardware::load("h200").unwrap().spec;
        // 4.8 GB at 4800 GB/s is 1 ms; 989.5 GFLOP of bf16 at 989.5 TFLOP/s is 1 ms too.
        let mut e = SolEntry {
            tensor_flops: IndexMap::new(),
            other_flops: 0,
            bytes_fused: 4_800_000_000,
        };
        assert!((e.t_sol_ms(&h200).unwrap() - 1.0).abs() < 1e-12);
        e.tensor_flops
            .insert("bfloat16".into(), 2 * 989_500_000_000);
        assert!((e.t_sol_ms(&h200).unwrap() - 2.0).abs() < 1e-12);
        assert!((e.intensity().unwrap() - 2.0 * 989.5e9 / 4.8e9).abs() < 1e-9);
    }

    #[test]
    fn rows_carry_reason_codes_and_geomeans_count_only_passed_workloads() {
        let t = |uuid: &str, status: &str, speedup: f64| -> Trace {
            let passed = status == "PASSED";
            serde_json::from_value(serde_json::json!({
                "definition": "d", "solution": "s",
                "workload": {"uuid": uuid, "axes": {"n": 4}, "inputs": {}, "tolerance": {"max_atol": 0.01, "max_rtol": 0.01}},
                "evaluation": {
                    "status": status,
                    "log": "\n--- stderr\nboom: the kernel crashed\nmore",
                    "correctness": if passed { serde_json::json!({}) } else { serde_json::Value::Null },
                    "performance": if passed { serde_json::json!({"latency_ms": 2.0, "reference_latency_ms": 2.0 * speedup, "speedup_factor": speedup}) } else { serde_json::Value::Null },
                    "environment": {"hardware": "NVIDIA_H200", "device": {"kind": "cuda", "name": "NVIDIA H200"}},
                    "retried": if passed { serde_json::Value::Null } else { serde_json::json!({"reason": "dual_clock", "first_attempt": "x"}) }
                }
            }))
            .unwrap()
        };
        let entries = [
            t("a", "PASSED", 2.0),
            t("b", "PASSED", 8.0),
            t("c", "RUNTIME_ERROR", 0.0),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, trace)| Entry {
            key: "p".into(),
            file: "f.jsonl".into(),
            line: i + 1,
            trace,
        })
        .collect();
        let mut sol = SolTable::default();
        sol.insert(
            "d",
            "a",
            SolEntry {
                tensor_flops: IndexMap::new(),
                other_flops: 1000,
                bytes_fused: 4_800_000_000,
            },
        );
        let r = Report::build(
            Loaded {
                entries,
                ..Loaded::default()
            },
            &ReportOptions {
                sol: Some(sol),
                ..ReportOptions::default()
            },
        );
        assert_eq!(r.devices.len(), 1);
        assert_eq!(r.devices[0].spec.as_ref().unwrap().spec.name, "h200");
        let failed = &r.rows[2];
        assert_eq!(failed.reasons, ["RUNTIME_ERROR", "retried:dual_clock"]);
        assert_eq!(failed.reason, "boom: the kernel crashed");
        assert_eq!(failed.axes, "n=4");
        // T_SOL 1 ms on the H200 against a 2 ms latency.
        assert!((r.rows[0].frac_sol.unwrap() - 0.5).abs() < 1e-12);
        assert!(r.rows[0].on_roofline() && !r.rows[1].on_roofline() && !failed.on_roofline());
        assert_eq!((r.geomeans[0].passed, r.geomeans[0].total), (2, 3));
        assert!((r.geomeans[0].geomean.unwrap() - 4.0).abs() < 1e-12);
        let html = crate::html::render(&r);
        assert_eq!(html.matches("<circle class=\"pt\"").count(), 1);
        assert_eq!(html.matches("<tr id=\"row-").count(), 3);
        assert!(html.contains(crate::html::CSP));
    }
}
