//! The run's output: each case's statuses in one word, the table of every case, the summary
//! line, and the run's failure where a case missed, was a false positive or errored.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{Result, bail};

use super::Opts;
use super::manifest::Case;
use super::run::Got;
use super::verdict::Verdict;

/// A case's statuses in one cell: `error` where kg-bench failed, else each status with its
/// count (`PASSED x2`).
pub(super) fn got_summary(g: &Got) -> String {
    if g.harness_error.is_some() {
        return "error".into();
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &g.statuses {
        *counts.entry(s.as_str()).or_insert(0) += 1;
    }
    counts
        .iter()
        .map(|(s, n)| {
            if *n > 1 {
                format!("{s} x{n}")
            } else {
                (*s).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Prints the table and the summary; fails on any miss, false positive or error (and, with
/// `--strict`, on a case caught with another status than expected).
pub(super) fn finish(
    rows: &[(Case, String, Verdict, String)],
    t0: Instant,
    opts: &Opts,
    work: &Path,
) -> Result<()> {
    print_table(rows);
    let count = |v: Verdict| rows.iter().filter(|r| r.2 == v).count();
    let (ok, other, missed, fp, err, gaps, skipped) = (
        count(Verdict::Ok),
        count(Verdict::CaughtOther),
        count(Verdict::Missed),
        count(Verdict::FalsePositive),
        count(Verdict::Error),
        count(Verdict::KnownGap),
        count(Verdict::Skipped),
    );
    println!(
        "{} case(s) in {:.0} s: {ok} ok, {other} caught with another status, {missed} MISSED, {fp} false positive(s), {err} error(s), {gaps} known gap(s) not yet defended (docs/integrity.md), {skipped} SKIPPED (kg-bench lacks what they need){}",
        rows.len(),
        t0.elapsed().as_secs_f64(),
        if opts.keep {
            format!("; scratch kept in `{}`", work.display())
        } else {
            String::new()
        }
    );
    let strict_fail = opts.strict && other > 0;
    if missed + fp + err > 0 || strict_fail {
        bail!(
            "red team failed: {missed} missed, {fp} false positive(s), {err} error(s){}",
            if strict_fail {
                format!(", {other} caught with another status (--strict)")
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

fn print_table(rows: &[(Case, String, Verdict, String)]) {
    let header = ["case", "expected", "got", "verdict", "caught by / needs"];
    let w0 = rows
        .iter()
        .map(|r| r.0.case.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let w1 = rows
        .iter()
        .map(|r| r.0.expected.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let w2 = rows.iter().map(|r| r.1.len()).max().unwrap_or(3).max(3);
    let w3 = 14;
    println!(
        "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
        header[0], header[1], header[2], header[3], header[4]
    );
    for (c, got, v, why) in rows {
        println!(
            "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
            c.case,
            c.expected,
            got,
            v.label(),
            why
        );
    }
}
