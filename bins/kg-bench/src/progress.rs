//! Progress on stderr: per-pair and per-workload lines, elapsed and estimated time.

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
/// terminal, so a long run shows in logs), a line per started workload in a terminal or with
/// `-v`, and, where CPU estimates exist, the elapsed time and an ETA.
pub(crate) struct Progress {
    pub(crate) verbosity: Verbosity,
    pub(crate) tty: bool,
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

impl Progress {
    pub(crate) fn new(verbosity: Verbosity, total: usize, estimated_total_s: f64) -> Self {
        Progress {
            verbosity,
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
            total,
            done: 0,
            current: IndexMap::new(),
            labels: Vec::new(),
            estimated_total_s,
            estimated_done_s: 0.0,
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
            Event::Notice(n) => eprintln!("notice: {n}"),
            Event::WorkloadStarted { uuid, .. } => self.started(0, uuid),
            Event::WorkloadFinished(t) => self.finished(0, t),
        }
    }

    /// A workload of a lane's pair starts: a line in a terminal or with `-v`.
    pub(crate) fn started(&mut self, lane: usize, uuid: &str) {
        if self.verbosity == Verbosity::Verbose || (self.tty && self.verbosity == Verbosity::Normal)
        {
            eprintln!(
                "[{}/{}] {} / {uuid} ...",
                self.done + 1,
                self.total,
                self.what(lane)
            );
        }
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
        if self.estimated_done_s > 0.0 && self.done < self.total {
            // The estimate scaled by how far off it has been so far.
            let left = (self.estimated_total_s - self.estimated_done_s).max(0.0)
                * (elapsed / self.estimated_done_s);
            line.push_str(&format!(", ETA ~{}", fmt_secs(left)));
        }
        line.push(')');
        if self.verbosity == Verbosity::Verbose && ev.status != Status::Passed {
            line.push_str(&format!("\n    {}", output::first_line(&ev.log)));
        }
        eprintln!("{line}");
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
