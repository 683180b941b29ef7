//! The PR-comment summary (`--markdown FILE`): verdict, stage table, findings. It restates the
//! report; it adds no judgement of its own.

use kg_contract::report::ValidationReport;

/// Renders the summary.
pub fn render(r: &ValidationReport) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "### kg-validate-pr: **{}**\n\n",
        r.verdict.as_str()
    ));
    s.push_str(&format!("{}\n\n", r.verdict_reason));
    let head = r
        .repo
        .head
        .clone()
        .unwrap_or_else(|| "null (local evidence only)".into());
    s.push_str(&format!(
        "- base `{}` · head `{}` · patch sha256 `{}`\n- device: {}{} · arch coverage: {}\n- target `{}` ({}), grid channel: {}\n\n",
        r.repo.base.clone().unwrap_or_default(),
        head,
        r.repo.patch_sha256.clone().unwrap_or_else(|| "none".into()),
        r.device,
        r.degraded_mode.as_ref().map(|d| format!(" ({d})")).unwrap_or_default(),
        if r.arch_coverage.is_empty() {
            "none".to_string()
        } else {
            r.arch_coverage.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")
        },
        r.test_selection.target,
        r.test_selection.runner,
        r.test_selection.grid_channel.clone().unwrap_or_else(|| "none".into()),
    ));
    s.push_str("| stage | status | note |\n|---|---|---|\n");
    for (name, st) in r.stages.iter() {
        s.push_str(&format!(
            "| {name} | {} | {} |\n",
            st.status.as_str(),
            st.note.replace('|', "\\|").replace('\n', " ")
        ));
    }
    if !r.findings.is_empty() {
        s.push_str("\n**Findings**\n\n");
        for f in &r.findings {
            s.push_str(&format!(
                "- `{}` ({}) {}\n",
                serde_json::to_value(f.severity)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default(),
                f.stage,
                f.detail
            ));
        }
    }
    s
}
