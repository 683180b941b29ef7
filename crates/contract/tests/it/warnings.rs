//! Unknown fields are accepted (upstream files carry extras) and reported as warnings.

use kg_contract::{Problem, load_definition};

use crate::support::fixture;

#[test]
fn unknown_fields_become_warnings_not_errors() {
    let def = fixture("warn/definition_typos.json");
    let (_, warnings) = load_definition(&def).unwrap();
    let joined = warnings.join("\n");
    assert!(
        joined.contains("unknown field `refrence` ignored"),
        "{joined}"
    );
    assert!(
        joined.contains("unknown field `inputs.x.descripton` ignored"),
        "{joined}"
    );
    assert!(joined.contains(&format!("`{}`", def.display())), "{joined}");

    let wl = fixture("warn/workload_typos.jsonl");
    let p = Problem::from_files(&def, &wl).unwrap();
    let joined = p.warnings.join("\n");
    assert!(
        joined.contains(&format!(
            "`{}` line 1: unknown field `tolerence` ignored",
            wl.display()
        )),
        "{joined}"
    );
    assert_eq!(p.warnings.len(), 3, "{joined}");
    // The misspelt tolerance is ignored, so the defaults apply.
    assert_eq!(
        p.workloads[0].workload.tolerance(),
        kg_contract::Tolerance::default()
    );
}
