//! Progress on stderr: a line per finished workload (also in logs), and on a terminal a
//! progress bar below them (pairs and workloads done, the pair each lane is on, the build
//! under way, elapsed time and an estimate of what is left).

use super::*;

/// How much goes to stderr while workloads run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

impl Verbosity {
    pub(crate) fn of(env: &EnvArgs) -> Verbosity {
        if env.quiet {
            Verbosity::Quiet
        } else if env.verbose {
            Verbosity::Verbose
        } else {
            Verbosity::Normal
        }
    }
}

/// Progress on stderr: a line per finished workload with its wall time (also outside a
/// terminal, so a long run shows in logs), a line per started workload with `-v`, and, where
/// CPU estimates exist, the elapsed time and an ETA. On a terminal (not with `--json` or
/// `-q`) an indicatif bar stays below the lines: workloads and pairs done, the pair each lane
/// is on, the build under way, elapsed and left.
pub(crate) struct Progress {
    pub(crate) verbosity: Verbosity,
    /// Whether stderr is a terminal.
    pub(crate) tty: bool,
    /// The bar, on a terminal.
    pub(crate) bar: Option<indicatif::ProgressBar>,
    /// Pairs this command will evaluate (0: not known), and how many have started.
    pub(crate) pairs: usize,
    pub(crate) pairs_started: usize,
    /// The solution being built ahead of the lanes, if any.
    pub(crate) building: Option<String>,
    pub(crate) started: Instant,
    /// Workloads this command will evaluate, and how many have finished.
    pub(crate) total: usize,
    pub(crate) done: usize,
    /// Per lane, the pair being evaluated (the problem key, not the definition name), with
    /// its workloads' CPU estimates.
    pub(crate) current: IndexMap<usize, LanePair>,
    /// Lane labels, shown in each line when there are several.
    pub(crate) labels: Vec<String>,
    pub(crate) estimated_total_s: f64,
    pub(crate) estimated_done_s: f64,
}

/// The pair a lane is evaluating.
#[derive(Default)]
pub(crate) struct LanePair {
    pub(crate) key: String,
    pub(crate) solution: String,
    pub(crate) estimates: IndexMap<String, f64>,
}

/// `12.3 s`, `4m05s`, `1h02m`.
pub(crate) fn fmt_secs(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "?".into();
    }
    if s < 60.0 {
        return format!("{s:.1} s");
    }
    let t = s.round() as u64;
    if t < 3600 {
        format!("{}m{:02}s", t / 60, t % 60)
    } else {
        format!("{}h{:02}m", t / 3600, (t % 3600) / 60)
    }
}

/// The bar's layout: elapsed, the bar, workloads done, then [`Progress::message`].
const BAR_TEMPLATE: &str = "{elapsed_precise} [{bar:28.cyan/blue}] {pos}/{len} workloads  {msg}";

impl Progress {
    /// Progress over `total` workloads; a bar when stderr is a terminal and `bar` allows it
    /// (not with `--json`), never with `-q`.
    pub(crate) fn new(
        verbosity: Verbosity,
        total: usize,
        estimated_total_s: f64,
        bar: bool,
    ) -> Self {
        let tty = std::io::stderr().is_terminal();
        let drawn = bar && verbosity != Verbosity::Quiet && tty;
        let bar = drawn.then(|| {
            Self::styled(indicatif::ProgressBar::with_draw_target(
                Some(total as u64),
                indicatif::ProgressDrawTarget::stderr(),
            ))
        });
        Progress {
            verbosity,
            tty,
            bar,
            pairs: 0,
            pairs_started: 0,
            building: None,
            started: Instant::now(),
            total,
            done: 0,
            current: IndexMap::new(),
            labels: Vec::new(),
            estimated_total_s,
            estimated_done_s: 0.0,
        }
    }

    fn styled(bar: indicatif::ProgressBar) -> indicatif::ProgressBar {
        if let Ok(style) = indicatif::ProgressStyle::with_template(BAR_TEMPLATE) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.enable_steady_tick(std::time::Duration::from_millis(500));
        bar
    }

    /// Prints a line above the bar (or plainly, without one).
    pub(crate) fn say(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// A build ahead of the lanes starts (`Some`) or ends (`None`).
    pub(crate) fn build(&mut self, solution: Option<&str>) {
        self.building = solution.map(str::to_string);
        self.refresh();
    }

    /// The bar's message: pairs started, each lane's pair, the build, the ETA.
    pub(crate) fn message(&self) -> String {
        let mut parts = Vec::new();
        if self.pairs > 0 {
            parts.push(format!("pair {}/{}", self.pairs_started, self.pairs));
        }
        let on: Vec<String> = self.current.keys().map(|&l| self.what(l)).collect();
        if !on.is_empty() {
            parts.push(on.join(", "));
        }
        if let Some(b) = &self.building {
            parts.push(format!("building {b}"));
        }
        if let Some(left) = self.left_s() {
            parts.push(format!("ETA ~{}", fmt_secs(left)));
        }
        parts.join(" · ")
    }

    fn refresh(&self) {
        if let Some(b) = &self.bar {
            b.set_message(self.message());
            b.set_position(self.done as u64);
        }
    }

    /// Seconds left: the CPU estimate of what is left, scaled by how far off it has been.
    fn left_s(&self) -> Option<f64> {
        if self.estimated_done_s <= 0.0 || self.done >= self.total {
            return None;
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        Some(
            (self.estimated_total_s - self.estimated_done_s).max(0.0)
                * (elapsed / self.estimated_done_s),
        )
    }

    /// The run is over: the bar goes, the lines stay.
    pub(crate) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }

    /// The pair lane `lane` is about to evaluate, with its workloads' CPU estimates (empty off
    /// the CPU).
    pub(crate) fn pair(
        &mut self,
        lane: usize,
        key: &str,
        solution: &str,
        estimates: IndexMap<String, f64>,
    ) {
        self.current.insert(
            lane,
            LanePair {
                key: key.to_string(),
                solution: solution.to_string(),
                estimates,
            },
        );
        self.pairs_started += 1;
        self.refresh();
    }

    /// `key / solution`, after the lane's label when there are several lanes.
    pub(crate) fn what(&self, lane: usize) -> String {
        let p = self.current.get(&lane);
        let (key, sol) = p.map_or(("?", "?"), |p| (p.key.as_str(), p.solution.as_str()));
        match self.labels.get(lane) {
            Some(l) if self.labels.len() > 1 => format!("[lane {lane} {l}] {key} / {sol}"),
            _ => format!("{key} / {sol}"),
        }
    }

    pub(crate) fn event(&mut self, e: &Event) {
        match e {
            Event::Notice(n) => self.say(&format!("notice: {n}")),
            Event::WorkloadStarted { uuid, .. } => self.started(0, uuid),
            Event::WorkloadFinished(t) => self.finished(0, t),
        }
    }

    /// A workload of a lane's pair starts: a line with `-v`, or in a terminal without a bar.
    pub(crate) fn started(&mut self, lane: usize, uuid: &str) {
        if self.verbosity == Verbosity::Verbose
            || (self.bar.is_none() && self.tty && self.verbosity == Verbosity::Normal)
        {
            self.say(&format!(
                "[{}/{}] {} / {uuid} ...",
                self.done + 1,
                self.total,
                self.what(lane)
            ));
        }
        self.refresh();
    }

    /// A workload of a lane's pair finished: a line with its status, wall time, elapsed time
    /// and ETA.
    pub(crate) fn finished(&mut self, lane: usize, t: &Trace) {
        self.done += 1;
        self.estimated_done_s += self
            .current
            .get(&lane)
            .and_then(|p| p.estimates.get(&t.workload.uuid))
            .copied()
            .unwrap_or(0.0);
        self.refresh();
        if self.verbosity == Verbosity::Quiet {
            return;
        }
        let Some(ev) = &t.evaluation else { return };
        let wall = ev.wall_s.map_or_else(|| "wall ?".into(), fmt_secs);
        let mut line = format!(
            "[{}/{}] {:<19} {:>8}  {} / {}",
            self.done,
            self.total,
            ev.status.as_str(),
            wall,
            self.what(lane),
            t.workload.uuid
        );
        let elapsed = self.started.elapsed().as_secs_f64();
        line.push_str(&format!("  (elapsed {}", fmt_secs(elapsed)));
        if let Some(left) = self.left_s() {
            line.push_str(&format!(", ETA ~{}", fmt_secs(left)));
        }
        line.push(')');
        if self.verbosity == Verbosity::Verbose && ev.status != Status::Passed {
            line.push_str(&format!("\n    {}", output::first_line(&ev.log)));
        }
        self.say(&line);
    }
}

/// A run that ends on an error (or a panic) clears the bar too, so the error is not printed
/// over it.
impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Warns before a CPU run estimated at more than [`LONG_RUN_S`], with what the usual
/// shortening flags would make of it; says the estimate of one over a minute.
pub(crate) fn warn_if_long(e: &CpuEstimate) {
    let CpuEstimate {
        estimated_s,
        short_s,
        interpreted,
    } = *e;
    if estimated_s <= LONG_RUN_S {
        if estimated_s > 60.0 {
            eprintln!(
                "notice: this CPU run is estimated at ~{} (a rough estimate from input sizes)",
                fmt_secs(estimated_s)
            );
        }
        return;
    }
    let why = if interpreted {
        " (Triton runs through its interpreter on the CPU, hundreds of ns per element per call)"
    } else {
        ""
    };
    eprintln!(
        "warning: this CPU run is estimated at ~{}{why}; `--max-workloads 1 --rounds 2` would take ~{} (a rough estimate from input sizes)",
        fmt_secs(estimated_s),
        fmt_secs(short_s)
    );
}

/// A CPU run estimated at more than this many seconds is warned about up front.
pub(crate) const LONG_RUN_S: f64 = 600.0;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn passed(uuid: &str) -> Trace {
        let eval: kg_contract::Evaluation = serde_json::from_value(serde_json::json!({
            "status": "PASSED", "log": "ok", "wall_s": 0.5,
            "environment": {"hardware": "CPU", "libs": {}},
            "timestamp": "2026-12-06T00:00:00Z"
        }))
        .unwrap();
        Trace {
            definition: "d".into(),
            solution: Some("s".into()),
            workload: serde_json::from_value(
                serde_json::json!({"uuid": uuid, "axes": {}, "inputs": {}}),
            )
            .unwrap(),
            evaluation: Some(eval),
            kernelgate_chain: None,
        }
    }

    /// The bar follows the run: pairs started, the pair each lane is on, the build under
    /// way, workloads done, and an ETA from the estimates.
    #[test]
    fn the_bar_counts_pairs_and_workloads_and_names_the_build() {
        let mut p = Progress::new(Verbosity::Quiet, 3, 6.0, false);
        assert!(p.bar.is_none(), "no bar with -q or off a terminal");
        p.bar = Some(Progress::styled(indicatif::ProgressBar::with_draw_target(
            Some(3),
            indicatif::ProgressDrawTarget::hidden(),
        )));
        p.pairs = 2;
        let est: IndexMap<String, f64> = [("w1".to_string(), 2.0), ("w2".to_string(), 2.0)]
            .into_iter()
            .collect();
        p.pair(0, "triton/rmsnorm", "fast", est);
        p.build(Some("cuda_rope"));
        let bar = p.bar.clone().unwrap();
        let m = bar.message();
        assert!(m.contains("pair 1/2"), "{m}");
        assert!(m.contains("triton/rmsnorm / fast"), "{m}");
        assert!(m.contains("building cuda_rope"), "{m}");
        assert!(!m.contains("ETA"), "no ETA before a workload finished: {m}");
        p.started(0, "w1");
        p.finished(0, &passed("w1"));
        assert_eq!(bar.position(), 1);
        p.build(None);
        let m = bar.message();
        assert!(!m.contains("building"), "{m}");
        assert!(m.contains("ETA ~"), "{m}");
        p.finish();
        assert!(bar.is_finished());
    }
}
