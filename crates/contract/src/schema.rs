//! JSON Schema for every artifact type (written to `docs/schemas/` by `cargo xtask schemas`).

use crate::{Definition, GpuClaim, LockOwner, Solution, Trace, ValidationReport, Workload};

/// `(file name, pretty JSON schema)` for every artifact type.
pub fn all() -> Vec<(&'static str, String)> {
    fn one<T: schemars::JsonSchema>() -> String {
        let schema = schemars::schema_for!(T);
        let mut s = serde_json::to_string_pretty(&schema).unwrap_or_default();
        s.push('\n');
        s
    }
    vec![
        ("definition.schema.json", one::<Definition>()),
        ("workload.schema.json", one::<Workload>()),
        ("solution.schema.json", one::<Solution>()),
        ("trace.schema.json", one::<Trace>()),
        ("gpu-claim.schema.json", one::<GpuClaim>()),
        ("gpu-lock-owner.schema.json", one::<LockOwner>()),
        ("validation-report.schema.json", one::<ValidationReport>()),
    ]
}
