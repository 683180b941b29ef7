//! Classes of integer leaves: leaves that hold the same value in every visible row move
//! together; a class is kept as in the template row or is a dimension that moves.

use kg_inject::ConstraintKind;

use super::numbers::lcm;
use super::paths::{Leaf, int_at};
use super::{FieldRules, ShapeProblem};

/// Integer leaves with equal values across all rows.
#[derive(Debug, Clone)]
pub(super) struct Class {
    /// Indices into the leaves.
    pub(super) leaves: Vec<usize>,
    /// The value in each visible row.
    pub(super) values: Vec<i64>,
    /// The first named leaf's name.
    pub(super) name: Option<String>,
    /// Kept as in the template row (not a dimension).
    pub(super) keep: bool,
    pub(super) rules: FieldRules,
}

fn is_knob(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    [
        "block", "warps", "stages", "tile", "group", "num_ctas", "chunk",
    ]
    .iter()
    .any(|k| l.contains(k))
}

/// Groups the integer leaves into classes, with their constraints and whether each is kept.
pub(super) fn classes_of(p: &ShapeProblem, leaves: &[Leaf], int_leaves: &[usize]) -> Vec<Class> {
    let mut classes: Vec<Class> = Vec::new();
    for &li in int_leaves {
        let values: Vec<i64> = p
            .rows
            .iter()
            .map(|r| int_at(r, &leaves[li].path).unwrap_or(0))
            .collect();
        if let Some(c) = classes.iter_mut().find(|c| c.values == values) {
            c.leaves.push(li);
            if c.name.is_none() {
                c.name = leaves[li].name.clone();
            }
        } else {
            classes.push(Class {
                leaves: vec![li],
                values,
                name: leaves[li].name.clone(),
                keep: false,
                rules: FieldRules::default(),
            });
        }
    }
    for c in &mut classes {
        for li in &c.leaves {
            let Some(name) = leaves[*li].name.as_deref() else {
                continue;
            };
            apply_constraints(&mut c.rules, name, &p.constraints);
        }
        let constant = c.values.iter().all(|v| *v == c.values[0]);
        let knob = c
            .leaves
            .iter()
            .any(|li| leaves[*li].name.as_deref().is_some_and(is_knob));
        c.keep = knob
            || c.rules.pinned
            || (constant && (c.values[0] <= 8 || p.init_values.contains(&c.values[0])));
    }
    classes
}

/// Adds the `assert` constraints on field `name` to `rules`.
fn apply_constraints(rules: &mut FieldRules, name: &str, constraints: &[(String, ConstraintKind)]) {
    for (n, k) in constraints {
        if n != name {
            continue;
        }
        match k {
            ConstraintKind::MultipleOf(m) if *m > 0 => {
                let cur = rules.multiple_of.unwrap_or(1);
                rules.multiple_of = Some(lcm(cur, *m));
            }
            ConstraintKind::AtMost(m) => rules.max = Some(rules.max.map_or(*m, |x| x.min(*m))),
            ConstraintKind::AtLeast(m) => rules.min = Some(rules.min.map_or(*m, |x| x.max(*m))),
            ConstraintKind::OneOf(_) | ConstraintKind::Equals(_) => rules.pinned = true,
            _ => {}
        }
    }
}
