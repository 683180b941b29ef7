//! The workload table: one sortable, filterable row per trace.

use std::fmt::Write as _;

use kg_contract::{Spread, Status};

use super::format::{esc, num_attr, opt, sig};
use crate::model::{DeviceGroup, Report, timing_str};

/// ` [p25–p75]` of a spread, as a note; empty without one.
fn spread_text(s: &Option<Spread>) -> String {
    s.as_ref().map_or_else(String::new, |s| {
        format!(
            " <span class=\"note\">[{}–{}]</span>",
            sig(s.p25_ms),
            sig(s.p75_ms)
        )
    })
}

/// A numeric cell that sorts by `v` at full precision and shows `text`.
fn num_td(v: Option<f64>, text: String) -> String {
    format!("<td class=\"n\" data-v=\"{}\">{text}</td>", num_attr(v))
}

/// The workload table with its filter controls, one row per trace.
pub(super) fn table_section(h: &mut String, r: &Report) {
    h.push_str("<section id=\"table\">\n<h2>Workloads</h2>\n<div class=\"controls\"><label>filter <input id=\"kg-filter\" type=\"search\" placeholder=\"problem, solution, workload, reason…\"></label><label>status <select id=\"kg-status\"><option value=\"\">all</option><option value=\"FAILED\">not passed</option>");
    for s in Status::ALL {
        let _ = write!(h, "<option value=\"{0}\">{0}</option>", s.as_str());
    }
    h.push_str("</select></label><span id=\"kg-shown\" class=\"note\"></span></div>\n");
    h.push_str("<p class=\"note\">Latencies are medians in ms, [p25–p75] of the timed calls after them; speedup is reference / candidate; fraction of SOL is T_SOL on the device's spec / latency (1 is the speed of light). Click a header to sort.</p>\n");
    h.push_str("<table id=\"results\"><thead><tr><th>problem</th><th>solution</th><th>workload</th><th>status</th><th data-type=\"num\">latency ms</th><th data-type=\"num\">ref ms</th><th data-type=\"num\">speedup</th><th data-type=\"num\">fraction of SOL</th><th>timing</th><th>device</th><th data-type=\"num\">wall s</th><th>reason codes</th><th>reason</th></tr></thead><tbody>\n");
    for row in &r.rows {
        let pass = row.status == Status::Passed;
        let device = r
            .devices
            .get(row.device)
            .map(DeviceGroup::label)
            .unwrap_or_default();
        let _ = writeln!(
            h,
            "<tr id=\"{}\" class=\"{}\" data-status=\"{}\" data-problem=\"{}\" data-solution=\"{}\" data-workload=\"{}\" title=\"{}\"><td>{}</td><td>{}</td><td class=\"mono\" title=\"{}\">{}</td><td class=\"status\">{}</td>{}{}{}{}<td>{}</td><td>{}</td>{}<td class=\"mono reasons\">{}</td><td>{}</td></tr>",
            esc(&row.id),
            if pass { "st-pass" } else { "st-fail" },
            row.status.as_str(),
            esc(&row.key),
            esc(&row.solution),
            esc(&row.workload),
            esc(&row.source),
            esc(&row.key),
            esc(&row.solution),
            esc(&row.axes),
            esc(&row.workload),
            row.status.as_str(),
            num_td(
                row.latency_ms,
                format!("{}{}", opt(row.latency_ms), spread_text(&row.spread))
            ),
            num_td(
                row.ref_latency_ms,
                format!(
                    "{}{}",
                    opt(row.ref_latency_ms),
                    spread_text(&row.ref_spread)
                )
            ),
            num_td(
                row.speedup,
                row.speedup
                    .map_or_else(|| "–".into(), |s| format!("{}x", sig(s)))
            ),
            num_td(row.frac_sol, opt(row.frac_sol)),
            row.timing.map_or("–", timing_str),
            esc(&device),
            num_td(row.wall_s, opt(row.wall_s)),
            esc(&row.reasons.join(" ")),
            esc(&row.reason),
        );
    }
    h.push_str("</tbody></table>\n</section>\n");
}
