//! `kg-bench dataset validate`: every problem of a corpus loaded and its reference checked.

use super::*;

pub(crate) fn validate(a: ValidateArgs, cancel: &CancelToken) -> Result<i32, Failure> {
    let dirs = corpus::discover(&a.corpus_dir).map_err(usage)?;
    let mut loaded = Vec::new();
    let mut findings: Vec<output::Finding> = Vec::new();
    for d in &dirs {
        match Problem::load(d) {
            Ok(p) => loaded.push(p),
            Err(e) => findings.push(output::Finding {
                problem: d.display().to_string(),
                workloads: 0,
                ok: false,
                messages: vec![e.to_string()],
            }),
        }
    }
    // Traces name only their definition: problems sharing a name are told apart by path in
    // `run`, but not by `verify --corpus` or by a reader of a trace.
    let dups =
        corpus::duplicate_definitions(loaded.iter().map(|p| (p.dir.as_path(), &p.definition)));
    let (interp, acquired) = prepare_env(&a.env)?;
    let timeout = if a.timeout.is_finite() && a.timeout > 0.0 {
        Duration::from_secs_f64(a.timeout)
    } else {
        return Err(usage(anyhow!(
            "--timeout must be a positive number of seconds"
        )));
    };
    let mut opts = acquired.eval_options();
    opts.timeout = timeout;
    let mut session = Session::new(interp, opts, cancel.clone()).map_err(from_exec)?;
    for p in &loaded {
        let mut messages: Vec<String> = p.warnings.clone();
        let smallest = p.workloads.iter().min_by_key(|w| corpus::input_elements(w));
        let mut ok = true;
        if let Some(d) = dups.iter().find(|d| d.dirs.contains(&p.dir)) {
            let others: Vec<String> = d
                .dirs
                .iter()
                .filter(|o| **o != p.dir)
                .map(|o| format!("`{}`", o.display()))
                .collect();
            // Different definitions under one name make a trace ambiguous: BAD. The same
            // definition twice (SOL-ExecBench's examples, one per language) is flagged only.
            ok = d.identical;
            messages.push(format!(
                "duplicate definition name `{}`: also defined by {}{}; traces name only the definition, so `kg-bench verify --corpus` cannot tell them apart (`run` keys them by path)",
                d.name,
                others.join(", "),
                if d.identical {
                    " (the same definition)"
                } else {
                    " with a different definition"
                }
            ));
        }
        if let Some(w) = smallest {
            match session.check_reference(p, w) {
                Ok(None) => {}
                Ok(Some(m)) => {
                    ok = false;
                    messages.push(format!(
                        "workload `{}` (line {}): {}",
                        w.workload.uuid,
                        w.line,
                        m.lines().next().unwrap_or("")
                    ));
                }
                Err(e) => {
                    session.shutdown();
                    return Err(from_exec(e));
                }
            }
        }
        findings.push(output::Finding {
            problem: if dups.iter().any(|d| d.dirs.contains(&p.dir)) {
                format!(
                    "{} ({})",
                    p.definition.name,
                    corpus::problem_key(&a.corpus_dir, &p.dir)
                )
            } else {
                p.definition.name.clone()
            },
            workloads: p.workloads.len(),
            ok,
            messages,
        });
    }
    session.shutdown();
    let bad = findings.iter().filter(|f| !f.ok).count();
    if a.env.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&findings)
                .context("serialise findings")
                .map_err(usage)?
        );
    } else {
        println!("{}", output::findings_table(&findings));
        println!("{} problem(s), {} bad", findings.len(), bad);
    }
    Ok(if bad == 0 { exit::OK } else { exit::FAILED })
}
