//! Speedups: their histogram and each problem's geomean with a small bar.

use std::fmt::Write as _;

use kg_contract::Status;

use super::format::{esc, num_attr, sig};
use crate::model::Report;

/// The speedups section: a histogram over passed workloads, then per-problem geomeans.
pub(super) fn speedup_section(h: &mut String, r: &Report) {
    h.push_str("<section id=\"speedups\">\n<h2>Speedups</h2>\n");
    let s: Vec<f64> = r
        .rows
        .iter()
        .filter(|x| x.status == Status::Passed)
        .filter_map(|x| x.speedup)
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    histogram(h, &s);
    geomeans(h, r);
    h.push_str("</section>\n");
}

/// Histogram of log2(speedup) in quarter-octave bins.
fn histogram(h: &mut String, s: &[f64]) {
    let _ = writeln!(
        h,
        "<figure id=\"speedup-hist\" data-n=\"{}\"><figcaption>Distribution of speedup over {} passed workload(s), quarter-octave bins (log scale); the dashed line is 1x.</figcaption>",
        s.len(),
        s.len()
    );
    if s.is_empty() {
        h.push_str("<p class=\"note\">No passed workload.</p></figure>\n");
        return;
    }
    let bin = |v: f64| (v.log2() * 4.0).floor() as i64;
    let lo = s.iter().map(|v| bin(*v)).min().unwrap_or(0).min(-1);
    let hi = s.iter().map(|v| bin(*v)).max().unwrap_or(0).max(0);
    let n = (hi - lo + 1) as usize;
    let mut counts = vec![0usize; n];
    for v in s {
        counts[(bin(*v) - lo) as usize] += 1;
    }
    let (w, ht, ml, mb, mt) = (820.0, 260.0, 50.0, 40.0, 15.0);
    let bw = (w - ml - 20.0) / n as f64;
    let top = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let _ = writeln!(
        h,
        "<svg width=\"{w}\" height=\"{ht}\" viewBox=\"0 0 {w} {ht}\" role=\"img\" aria-label=\"speedup histogram\">"
    );
    let _ = writeln!(
        h,
        "<line class=\"axis\" x1=\"{ml}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/>",
        ht - mb,
        w - 20.0,
        ht - mb
    );
    for (i, c) in counts.iter().enumerate() {
        let k = lo + i as i64;
        let (a, b) = (2f64.powf(k as f64 / 4.0), 2f64.powf((k + 1) as f64 / 4.0));
        let bh = *c as f64 / top * (ht - mb - mt);
        let x0 = ml + i as f64 * bw;
        let _ = writeln!(
            h,
            "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" data-lo=\"{a:e}\" data-hi=\"{b:e}\" data-count=\"{c}\"><title>{}x–{}x: {c}</title></rect>",
            x0 + 1.0,
            ht - mb - bh,
            (bw - 2.0).max(1.0),
            sig(a),
            sig(b)
        );
        if *c > 0 {
            let _ = writeln!(
                h,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{c}</text>",
                x0 + bw / 2.0,
                ht - mb - bh - 3.0
            );
        }
        if k % 4 == 0 {
            let _ = writeln!(
                h,
                "<text x=\"{x0:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}x</text>",
                ht - mb + 16.0,
                sig(a)
            );
        }
        if k == 0 {
            let _ = writeln!(
                h,
                "<line class=\"one\" x1=\"{x0:.1}\" y1=\"{mt}\" x2=\"{x0:.1}\" y2=\"{:.1}\"/>",
                ht - mb
            );
        }
    }
    let _ = writeln!(
        h,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">speedup (reference / candidate)</text>",
        (ml + w) / 2.0,
        ht - 6.0
    );
    h.push_str("</svg></figure>\n");
}

/// A table of each (problem, solution)'s geomean speedup with a bar centred on 1x.
fn geomeans(h: &mut String, r: &Report) {
    h.push_str("<h3>Geomean speedup per problem</h3>\n<table id=\"geomeans\"><thead><tr><th>problem</th><th>solution</th><th>passed</th><th>workloads</th><th>geomean speedup</th><th>chart (log scale, 1x in the middle)</th></tr></thead><tbody>\n");
    let span = r
        .geomeans
        .iter()
        .filter_map(|g| g.geomean)
        .map(|g| g.log2().abs())
        .fold(1.0, f64::max);
    let (w, ht) = (240.0, 14.0);
    for g in &r.geomeans {
        let bar = g.geomean.map_or_else(String::new, |v| {
            let mid = w / 2.0;
            let len = v.log2() / span * (w / 2.0 - 2.0);
            let (x, wd) = if len >= 0.0 { (mid, len) } else { (mid + len, -len) };
            format!(
                "<svg width=\"{w}\" height=\"{ht}\" viewBox=\"0 0 {w} {ht}\"><rect class=\"gbar{}\" x=\"{x:.1}\" y=\"2\" width=\"{:.1}\" height=\"{:.1}\"/><line class=\"one\" x1=\"{mid}\" y1=\"0\" x2=\"{mid}\" y2=\"{ht}\"/></svg>",
                if v < 1.0 { " slow" } else { "" },
                wd.max(1.0),
                ht - 4.0
            )
        });
        let _ = writeln!(
            h,
            "<tr data-problem=\"{}\" data-solution=\"{}\" data-geomean=\"{}\"><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{bar}</td></tr>",
            esc(&g.key),
            esc(&g.solution),
            num_attr(g.geomean),
            esc(&g.key),
            esc(&g.solution),
            g.passed,
            g.total,
            g.geomean
                .map_or_else(|| "–".into(), |v| format!("{}x", sig(v)))
        );
    }
    h.push_str("</tbody></table>\n");
}
