//! The plan of a corpus run: the problems and pairs loaded before anything runs, the filters,
//! refusals and shards applied to them.

use super::*;

/// What a corpus run covers.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// The corpus directory (problem directories at any depth below).
    pub corpus_dir: PathBuf,
    /// Where the solutions come from.
    pub solutions: SolutionSource,
    /// The output directory of trace files and `summary.json`.
    pub output_dir: PathBuf,
    /// Filter expressions ([`corpus::Filter`]); a pair is selected when any matches (none:
    /// every pair).
    pub filters: Vec<String>,
}

/// One problem/solution pair of a plan.
#[derive(Debug)]
pub struct PlannedPair {
    /// The solution and its file.
    pub found: corpus::FoundSolution,
    /// Its trace file.
    pub path: PathBuf,
    /// The solution's hash ([`chain::solution_sha256`]).
    pub sha256: String,
    /// Why it is not evaluated here (set by [`CorpusPlan::refuse`]).
    pub refused: Option<String>,
}

/// One problem of a plan, keyed by its path.
#[derive(Debug)]
pub struct PlannedProblem {
    /// The problem key ([`corpus::problem_key`]).
    pub key: String,
    /// The problem.
    pub problem: Problem,
    /// Its tree as loaded: every evaluation of it must find it unchanged.
    pub tree: DirSnapshot,
    /// That tree's hash.
    pub tree_sha256: String,
    /// Its solutions from the source.
    pub found: FoundSolutions,
    /// The pairs the filters selected.
    pub pairs: Vec<PlannedPair>,
}

/// The problems and pairs of a corpus run, loaded before anything runs.
#[derive(Debug)]
pub struct CorpusPlan {
    options: PlanOptions,
    /// The loaded problems, in corpus order.
    pub problems: Vec<PlannedProblem>,
    /// Problems that failed to load (by key), with the reason.
    pub errors: IndexMap<String, String>,
    /// Refused pairs: problem key → solution → reason.
    pub refused: IndexMap<String, IndexMap<String, String>>,
    refusals_checked: bool,
    /// The shard this plan was cut to ([`CorpusPlan::shard`]).
    shard: Option<ShardListing>,
}

impl CorpusPlan {
    /// Loads the corpus: every problem and its solutions, filtered. A problem that does not
    /// load is reported and listed in [`CorpusPlan::errors`]; a solution that does not load
    /// stops the plan, so bad solutions stop before anything runs.
    pub fn load(
        options: PlanOptions,
        reporter: &mut dyn Reporter,
    ) -> Result<CorpusPlan, RunnerError> {
        let dirs = corpus::discover(&options.corpus_dir)?;
        if let SolutionSource::Dir(d) = &options.solutions
            && !d.is_dir()
        {
            return Err(RunnerError::SolutionsNotADirectory(d.clone()));
        }
        let filters: Vec<corpus::Filter> = options
            .filters
            .iter()
            .map(|f| f.parse())
            .collect::<Result<_, _>>()?;
        let mut problems: Vec<PlannedProblem> = Vec::new();
        let mut errors: IndexMap<String, String> = IndexMap::new();
        let mut failed = |key: String, error: String, reporter: &mut dyn Reporter| {
            reporter.report(&RunEvent::ProblemFailed {
                key: key.clone(),
                error: error.clone(),
            });
            errors.insert(key, error);
        };
        for d in &dirs {
            let key = corpus::problem_key(&options.corpus_dir, d);
            let p = match Problem::load(d) {
                Ok(p) => p,
                Err(e) => {
                    failed(key, e.to_string(), reporter);
                    continue;
                }
            };
            let found = corpus::find_solutions(&p, &key, &options.solutions)?;
            let tree = crate::integrity::snapshot_dir(&p.dir);
            let tree_sha256 = match tree.sha256() {
                Ok(sha) => sha,
                Err(e) => {
                    failed(key, e.to_string(), reporter);
                    continue;
                }
            };
            let mut pairs = Vec::new();
            for f in &found.solutions {
                let pair = corpus::PairRef {
                    key: &key,
                    definition: &p.definition.name,
                    solution: &f.solution,
                };
                if !corpus::selected(&filters, &pair) {
                    continue;
                }
                pairs.push(PlannedPair {
                    path: corpus::trace_path(&options.output_dir, &key, &f.solution.name),
                    sha256: chain::solution_sha256(&f.solution)?,
                    found: f.clone(),
                    refused: None,
                });
            }
            problems.push(PlannedProblem {
                key,
                problem: p,
                tree,
                tree_sha256,
                found,
                pairs,
            });
        }
        for dup in corpus::duplicate_definitions(
            problems
                .iter()
                .map(|p| (p.problem.dir.as_path(), &p.problem.definition)),
        ) {
            reporter.report(&RunEvent::DuplicateDefinition(dup));
        }
        corpus::check_trace_paths(problems.iter().flat_map(|p| {
            p.pairs.iter().map(|s| {
                let from = s
                    .found
                    .file
                    .as_ref()
                    .map_or_else(|| "reference".to_string(), |f| f.display().to_string());
                (format!("{} / {from}", p.key), s.path.as_path())
            })
        }))?;
        for p in problems.iter().filter(|p| p.found.solutions.is_empty()) {
            reporter.report(&RunEvent::NoSolutions {
                key: p.key.clone(),
                searched: p.found.searched.clone(),
            });
        }
        if options.solutions != SolutionSource::Reference {
            let mut by_layout: IndexMap<SolutionLayout, usize> = IndexMap::new();
            for l in problems.iter().flat_map(|p| p.found.layouts.iter()) {
                *by_layout.entry(*l).or_default() += 1;
            }
            reporter.report(&RunEvent::SolutionLayouts(by_layout));
        }
        let plan = CorpusPlan {
            options,
            problems,
            errors,
            refused: IndexMap::new(),
            refusals_checked: false,
            shard: None,
        };
        if !filters.is_empty() && plan.selected() == 0 {
            return Err(RunnerError::FilterMatchedNothing {
                filters: plan.options.filters.clone(),
                corpus: plan.options.corpus_dir.clone(),
            });
        }
        Ok(plan)
    }

    /// The options the plan was loaded with.
    pub fn options(&self) -> &PlanOptions {
        &self.options
    }

    /// The number of pairs the filters selected.
    pub fn selected(&self) -> usize {
        self.problems.iter().map(|p| p.pairs.len()).sum()
    }

    /// Keeps only the pairs of shard `spec` ([`crate::shard`]) and returns the listing of the
    /// whole corpus: every shard computes the same partition of all selected pairs from their
    /// workloads (at most `max_workloads` each). Problems stay: each shard's summary describes
    /// them all. Call it before [`CorpusPlan::refuse`], so a shard refuses only its own pairs.
    pub fn shard(
        &mut self,
        spec: ShardSpec,
        max_workloads: Option<usize>,
    ) -> Result<&ShardListing, ShardError> {
        let selected = self.selected();
        if selected < spec.n as usize {
            return Err(ShardError::TooManyShards {
                spec,
                pairs: selected,
            });
        }
        let out_dir = &self.options.output_dir;
        let mut pairs = Vec::new();
        for p in &self.problems {
            let workloads = corpus::select_workloads(&p.problem, None, max_workloads);
            let cost = crate::shard::pair_cost(&workloads);
            for s in &p.pairs {
                pairs.push(ShardPair {
                    key: p.key.clone(),
                    solution: s.found.solution.name.clone(),
                    solution_sha256: s.sha256.clone(),
                    trace: chain::head_key(out_dir, &s.path),
                    cost,
                    shard: 0,
                });
            }
        }
        let costs: Vec<u64> = pairs.iter().map(|p| p.cost).collect();
        for (p, k) in pairs
            .iter_mut()
            .zip(crate::shard::partition(&costs, spec.n))
        {
            p.shard = k;
        }
        let mut ours = pairs.iter().map(|p| p.shard == spec.k);
        for p in &mut self.problems {
            p.pairs.retain(|_| ours.next().unwrap_or(false));
        }
        let problems = self
            .problems
            .iter()
            .map(|p| ShardProblem {
                key: p.key.clone(),
                tree_sha256: Some(p.tree_sha256.clone()),
            })
            .chain(self.errors.keys().map(|k| ShardProblem {
                key: k.clone(),
                tree_sha256: None,
            }))
            .collect();
        Ok(self.shard.insert(ShardListing {
            spec,
            problems,
            pairs,
        }))
    }

    /// The shard listing, when the plan was cut to a shard.
    pub fn shard_listing(&self) -> Option<&ShardListing> {
        self.shard.as_ref()
    }

    /// Refuses, up front and named, the pairs that cannot run on `device` with `python`: a
    /// language kernelgate does not run, or one whose toolchain is missing here. Fails when
    /// every selected pair is refused. Done once; [`CorpusRunner::run`] calls it when the
    /// caller has not.
    pub fn refuse(
        &mut self,
        device: &DeviceChoice,
        python: &Path,
        reporter: &mut dyn Reporter,
    ) -> Result<(), RunnerError> {
        if self.refusals_checked {
            return Ok(());
        }
        self.refusals_checked = true;
        for p in &mut self.problems {
            for s in &mut p.pairs {
                let sol = &s.found.solution;
                let Err(e) =
                    check_languages(sol).and_then(|()| toolchain_check(sol, device, python))
                else {
                    continue;
                };
                let reason = e.to_string();
                reporter.report(&RunEvent::PairRefused {
                    key: p.key.clone(),
                    solution: sol.name.clone(),
                    languages: sol.spec.languages.clone(),
                    error: e,
                });
                self.refused
                    .entry(p.key.clone())
                    .or_default()
                    .insert(sol.name.clone(), reason.clone());
                s.refused = Some(reason);
            }
        }
        let refused: usize = self.refused.values().map(IndexMap::len).sum();
        let selected = self.selected();
        if refused > 0 {
            reporter.report(&RunEvent::RefusedTotal { refused, selected });
            if refused == selected {
                return Err(RunnerError::AllRefused {
                    device: device.clone(),
                });
            }
        }
        Ok(())
    }
}
