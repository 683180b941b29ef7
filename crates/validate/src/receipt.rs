//! `execution_receipt`'s grid check: which grid cells the watched route ran, read from the
//! `--shape-vars` tuples when given and otherwise from the route locals the probe recorded, and
//! which route locals held a cell the `--shape-vars` tuples missed (so a user told "not
//! executed" also learns which names would have matched).

use indexmap::IndexMap;
use kg_contract::report::GridCellTrace;

use crate::shapes::{normalize_cell, normalize_token};

/// Ways kept per cell; a reader needs a suggestion, not every permutation.
const MAX_WAYS: usize = 6;

/// Assignments of distinct scalar locals to a cell's coordinates, in coordinate order.
fn assignments(coords: &[String], obs: &IndexMap<String, String>, out: &mut Vec<Vec<String>>) {
    fn go(
        coords: &[String],
        obs: &IndexMap<String, String>,
        acc: &mut Vec<String>,
        out: &mut Vec<Vec<String>>,
    ) {
        if out.len() >= MAX_WAYS {
            return;
        }
        let Some(coord) = coords.get(acc.len()) else {
            out.push(acc.clone());
            return;
        };
        for (name, value) in obs {
            if !value.contains(',') && normalize_token(value) == *coord && !acc.contains(name) {
                acc.push(name.clone());
                go(coords, obs, acc, out);
                acc.pop();
            }
        }
    }
    go(coords, obs, &mut Vec::new(), out);
}

/// How `cell` showed up: in the `--shape-vars` tuples (`executed`, meaningful only when
/// `shape_vars_given`) and in the recorded locals of each route call (`observations`).
pub fn trace_cell(
    cell: &str,
    executed: &[String],
    observations: &[IndexMap<String, String>],
    shape_vars_given: bool,
) -> GridCellTrace {
    let norm = normalize_cell(cell);
    let coords: Vec<String> = norm.split(',').map(str::to_string).collect();
    let mut held_by: Vec<Vec<String>> = Vec::new();
    for obs in observations {
        // A single local holding the whole cell first (`shape`, `x.shape`): the likeliest fix.
        let mut ways: Vec<Vec<String>> = obs
            .iter()
            .filter(|(_, v)| normalize_cell(v) == norm)
            .map(|(k, _)| vec![k.clone()])
            .collect();
        if coords.len() > 1 {
            assignments(&coords, obs, &mut ways);
        }
        // Plain locals before `x.shape`: the simpler spelling is the one suggested first.
        ways.sort_by_key(|w| w.iter().filter(|n| n.contains('.')).count());
        for w in ways {
            if held_by.len() < MAX_WAYS && !held_by.contains(&w) {
                held_by.push(w);
            }
        }
    }
    GridCellTrace {
        cell: cell.to_string(),
        in_executed_shapes: shape_vars_given && executed.iter().any(|s| normalize_cell(s) == norm),
        held_by,
    }
}

/// The one list of locals that holds every cell (checked in the order the first cell lists
/// them); `None` when no single naming covers the whole grid.
pub fn consistent_locals(traces: &[GridCellTrace]) -> Option<Vec<String>> {
    let first = traces.first()?;
    first
        .held_by
        .iter()
        .find(|way| traces.iter().all(|t| t.held_by.contains(way)))
        .cloned()
}

/// `` `shape` `` or `` `B`,`T`,`V` ``, and the `--shape-vars` spelling.
fn way_text(way: &[String]) -> (String, String) {
    (
        way.iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(","),
        way.join(","),
    )
}

/// What a cell's trace tells the user: which locals held it and the `--shape-vars` that would
/// have matched, or that no route local did.
pub fn held_note(t: &GridCellTrace) -> String {
    match t.held_by.first() {
        None => format!("no route local held {}", t.cell),
        Some(best) => {
            let all: Vec<String> = t.held_by.iter().map(|w| way_text(w).0).collect();
            format!(
                "{} held by route local(s) {} (`--shape-vars {}` would match)",
                t.cell,
                all.join(" or "),
                way_text(best).1
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(pairs: &[(&str, &str)]) -> IndexMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_flattened_route_names_the_local_that_holds_the_cell() {
        // Liger-Kernel: the route flattens (3, 67, 4097) to (201, 4097); `shape` kept the cell.
        let o = vec![obs(&[
            ("x.shape", "3,67,4097"),
            ("shape", "3,67,4097"),
            ("n_cols", "4097"),
        ])];
        let t = trace_cell("3,67,4097", &["201,4097".into()], &o, true);
        assert!(!t.in_executed_shapes);
        assert_eq!(t.held_by[0], vec!["shape".to_string()]);
        assert_eq!(t.held_by[1], vec!["x.shape".to_string()]);
        let note = held_note(&t);
        assert!(
            note.contains("`shape`") && note.contains("--shape-vars shape"),
            "{note}"
        );
    }

    #[test]
    fn coordinates_in_separate_locals_and_dtype_spellings_match() {
        let o = vec![obs(&[("M", "64"), ("N", "2000"), ("dtype", "float32")])];
        let t = trace_cell("64,2000,f32", &[], &o, false);
        assert!(!t.in_executed_shapes, "no --shape-vars, nothing executed");
        assert_eq!(t.held_by, vec![vec!["M", "N", "dtype"]]);
        assert_eq!(
            consistent_locals(&[t]),
            Some(vec!["M".into(), "N".into(), "dtype".into()])
        );
        let none = trace_cell("3,5", &[], &o, false);
        assert!(none.held_by.is_empty());
        assert_eq!(held_note(&none), "no route local held 3,5");
    }

    #[test]
    fn the_grid_needs_one_naming_for_every_cell() {
        let o = vec![
            obs(&[("M", "4"), ("N", "8")]),
            obs(&[("a", "5"), ("b", "130")]),
        ];
        let t = vec![
            trace_cell("4,8", &[], &o, false),
            trace_cell("5,130", &[], &o, false),
        ];
        assert_eq!(consistent_locals(&t), None);
        let o = vec![
            obs(&[("M", "4"), ("N", "8")]),
            obs(&[("M", "5"), ("N", "130")]),
        ];
        let t = vec![
            trace_cell("4,8", &[], &o, false),
            trace_cell("5,130", &["5,130".into()], &o, true),
        ];
        assert!(t[1].in_executed_shapes);
        assert_eq!(consistent_locals(&t), Some(vec!["M".into(), "N".into()]));
    }
}
