//! The run header: inputs, counts, each device's facts, and the bound hashes.

use std::fmt::Write as _;

use super::format::{esc, sig};
use crate::model::{DeviceGroup, Report};

/// One row of a facts table; `value` is HTML.
fn fact(h: &mut String, name: &str, value: &str) {
    let _ = writeln!(h, "<tr><th>{}</th><td>{value}</td></tr>", esc(name));
}

/// The set's items, escaped and joined by `; `, or `none` as a note when it is empty.
fn joined(set: &std::collections::BTreeSet<String>, none: &str) -> String {
    if set.is_empty() {
        format!("<span class=\"note\">{}</span>", esc(none))
    } else {
        set.iter().map(|s| esc(s)).collect::<Vec<_>>().join("; ")
    }
}

/// The run header: inputs, run facts, each device's facts, the bound hashes and warnings.
pub(super) fn header(h: &mut String, r: &Report) {
    h.push_str("<header id=\"run-header\">\n<h1>kernelgate report</h1>\n");
    let _ = writeln!(
        h,
        "<p class=\"note\">kg-report {}; from {}</p>",
        env!("CARGO_PKG_VERSION"),
        r.inputs
            .iter()
            .map(|i| format!("<code>{}</code>", esc(i)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    h.push_str("<table class=\"facts\" id=\"run-facts\">\n");
    for (dir, s) in &r.summaries {
        fact(
            h,
            "corpus",
            &format!(
                "<code>{}</code> (run <code>{}</code>, device chosen: {}, summary v{})",
                esc(&s.corpus),
                esc(&dir.display().to_string()),
                esc(&s.device),
                s.schema_version
            ),
        );
    }
    let counts = r
        .status_counts()
        .iter()
        .map(|(s, n)| format!("{n} {}", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    fact(
        h,
        "traces",
        &format!(
            "<span id=\"trace-count\" data-n=\"{}\">{}</span>: {counts}",
            r.rows.len(),
            r.rows.len()
        ),
    );
    fact(
        h,
        "geomean speedup",
        &r.overall_geomean().map_or_else(
            || "– (nothing passed)".into(),
            |g| format!("{}x over passed workloads", sig(g)),
        ),
    );
    h.push_str("</table>\n");
    for (i, d) in r.devices.iter().enumerate() {
        device_facts(h, i, d);
    }
    h.push_str("<h2>Corpus and solution hashes</h2>\n");
    if r.hashes.is_empty() {
        h.push_str(
            "<p class=\"note\">No trace carries a chain manifest, so no hashes are bound.</p>\n",
        );
    } else {
        h.push_str("<p class=\"note\">From each trace's chain manifest (<code>kernelgate_chain.manifest</code>): the problem directory's tree hash and the solution's SHA-256 when it ran. <code>kg-bench verify</code> checks them.</p>\n<table id=\"hashes\"><thead><tr><th>problem</th><th>solution</th><th>problem tree SHA-256</th><th>solution SHA-256</th></tr></thead><tbody>\n");
        for x in &r.hashes {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td></tr>",
                esc(&x.key),
                esc(&x.solution),
                esc(&x.problem_tree_sha256),
                esc(&x.solution_sha256)
            );
        }
        h.push_str("</tbody></table>\n");
    }
    if r.unchained > 0 {
        let _ = writeln!(
            h,
            "<p class=\"bad\">{} trace(s) carry no chain record: nothing binds them to a problem or solution.</p>",
            r.unchained
        );
    }
    if !r.warnings.is_empty() {
        h.push_str("<details><summary>warnings while loading</summary><ul>");
        for w in &r.warnings {
            let _ = write!(h, "<li>{}</li>", esc(w));
        }
        h.push_str("</ul></details>\n");
    }
    h.push_str("</header>\n");
}

fn device_facts(h: &mut String, i: usize, d: &DeviceGroup) {
    let _ = writeln!(
        h,
        "<h2 id=\"device-{i}\">Device {}</h2>\n<table class=\"facts device\" data-device=\"{i}\">",
        esc(&d.label())
    );
    let mut ident = format!("{} <code>{}</code>", esc(&d.name), esc(&d.kind));
    if let Some(u) = &d.uuid {
        let _ = write!(ident, ", UUID <code>{}</code>", esc(u));
    }
    if let Some(a) = &d.arch {
        let _ = write!(ident, ", {}", esc(a));
    }
    fact(h, "device", &ident);
    fact(
        h,
        "hardware",
        &joined(&d.hardware.iter().cloned().collect(), "not recorded"),
    );
    fact(h, "host", &joined(&d.hosts, "not recorded"));
    let driver = d.libs.get("driver").map_or_else(
        || "<span class=\"note\">not recorded in the traces</span>".to_string(),
        |v| joined(v, ""),
    );
    fact(h, "driver", &driver);
    let libs = d
        .libs
        .iter()
        .filter(|(k, _)| k.as_str() != "driver")
        .map(|(k, v)| {
            format!(
                "{} {}",
                esc(k),
                v.iter().map(|s| esc(s)).collect::<Vec<_>>().join(" / ")
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    fact(h, "libraries", &libs);
    let locked = if d.clocks_locked {
        "<span class=\"ok\" data-locked=\"true\">locked</span>"
    } else {
        "<span class=\"bad\" data-locked=\"false\">not locked</span>"
    };
    fact(
        h,
        "clocks",
        &format!("{locked}: {}", joined(&d.clocks, "not recorded")),
    );
    let timing: std::collections::BTreeSet<String> =
        d.timing.iter().map(|s| s.to_string()).collect();
    let timing_html = if timing.len() > 1 {
        format!(
            "{} <span class=\"bad\">(mixed: latencies are not comparable across methods)</span>",
            joined(&timing, "")
        )
    } else {
        joined(&timing, "no passed trace")
    };
    fact(h, "timing method", &timing_html);
    fact(
        h,
        "kernelgate version",
        &joined(&d.versions, "not recorded"),
    );
    let mut sandbox = format!(
        "{} trace(s) sandboxed, {} with the sandbox off",
        d.sandboxed.0, d.sandboxed.1
    );
    if !d.layers.is_empty() {
        sandbox.push_str("<ul class=\"layers\">");
        for (layer, c) in &d.layers {
            let cls = if c.held == c.seen { "ok" } else { "bad" };
            let _ = write!(
                sandbox,
                "<li class=\"{cls}\" data-layer=\"{}\">{}: held in {} of {}</li>",
                layer.as_str(),
                layer.as_str(),
                c.held,
                c.seen
            );
        }
        sandbox.push_str("</ul>");
    }
    fact(h, "sandbox layers", &sandbox);
    let spec = match &d.spec {
        Some(s) => format!(
            "{}: {}; vector fp32 {} TFLOP/s, bandwidth {} GB/s",
            esc(&s.spec.display_name),
            esc(&d.spec_note),
            sig(s.spec.vector_fp32_tflops.value),
            sig(s.spec.hbm_bandwidth_gbps.value)
        ),
        None => format!("<span class=\"note\">{}</span>", esc(&d.spec_note)),
    };
    fact(h, "hardware spec", &spec);
    fact(h, "traces", &d.traces.to_string());
    h.push_str("</table>\n");
}
