//! `docs/schemas/*.json` must equal `kg_contract::schema::all()`.
//!
//! Regenerate with `cargo xtask schemas` (or `KG_BLESS=1 cargo nextest run -p kg-contract schemas`).

use crate::support::workspace;

#[test]
fn checked_in_schemas_are_current() {
    let dir = workspace().join("docs/schemas");
    let bless = std::env::var_os("KG_BLESS").is_some_and(|v| v == "1");
    let expected = kg_contract::schema::all();
    let mut stale = Vec::new();
    for (name, text) in &expected {
        let path = dir.join(name);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() != Some(text.as_str()) {
            if bless {
                kg_contract::io::write_atomic(&path, text.as_bytes()).unwrap();
            } else {
                stale.push(format!(
                    "{} ({})",
                    path.display(),
                    if current.is_some() {
                        "differs"
                    } else {
                        "missing"
                    }
                ));
            }
        }
    }
    // A schema file for a type that no longer exists is stale too.
    for entry in std::fs::read_dir(&dir).into_iter().flatten() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".schema.json") && !expected.iter().any(|(n, _)| *n == name) {
            stale.push(format!(
                "{} (no such type in schema::all())",
                dir.join(&name).display()
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "JSON Schemas are stale:\n  {}\nhint: run `cargo xtask schemas`",
        stale.join("\n  ")
    );
}

#[test]
fn schemas_are_valid_json_with_titles() {
    for (name, text) in kg_contract::schema::all() {
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(v["title"].is_string(), "{name} has no title");
        assert!(text.ends_with('\n'), "{name}");
    }
}
