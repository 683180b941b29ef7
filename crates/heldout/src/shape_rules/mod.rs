//! The deterministic `rules` backend: from a task's visible shape rows, 8 held-out rows —
//! edge 1, scale-up 1, scale-down 1, alignment-stress 2, asymmetric 1, production 2 —
//! honouring what the task's source states (`assert` constraints on a field's name,
//! `get_init_inputs()` values, dtypes and other non-integer fields kept as written).
//!
//! How a row is read: its integer leaves are grouped into *classes* of leaves that hold the
//! same value in every visible row (so `([B, F], [B, F])` moves `B` in both tensors together).
//! A class is *kept* as in the template row when its field name looks like a tuning knob
//! (`BLOCK`, `warps`, `stages`, `tile`, `group`), when an `assert` pins it (`==`, `in`), or
//! when it is constant across rows and either ≤ 8 or equal to a `get_init_inputs()` value.
//! Every other class is a *dimension* and moves by category. Non-integer leaves (dtypes,
//! flags, strings) are categorical: each generated dimension set is crossed with every
//! distinct categorical combination of the visible rows (up to 4; beyond that they cycle).
//!
//! [`generate`] is defined here; its steps are split by job: `paths` (a row's leaves),
//! `classes` (classes of integer leaves, kept or dimension), `layout` (the rows read: classes,
//! dimensions, template rows; the final rows crossed with the categorical combinations),
//! `drafts` (each category's rows, the constraints, newness) and `numbers` (the seeded
//! generator, primes, medians).

use kg_inject::{ConstraintKind, PyValue};

mod classes;
mod drafts;
mod layout;
mod numbers;
mod paths;

use layout::Layout;
use numbers::Rng;

/// A held-out shape category, with how many rows each gets.
pub const CATEGORIES: [(&str, usize); 6] = [
    ("edge", 1),
    ("scale-up", 1),
    ("scale-down", 1),
    ("alignment-stress", 2),
    ("asymmetric", 1),
    ("production", 2),
];

/// Input budget of one shape (the "inputs ≤ 2 GB"), estimated as the product of the
/// dimension classes × 4 bytes × 3 tensors.
pub const MAX_INPUT_BYTES: f64 = 2.0 * 1024.0 * 1024.0 * 1024.0;

/// A generated row.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratedRow {
    /// Its category.
    pub category: &'static str,
    /// What it does.
    pub note: String,
    /// The row value.
    pub value: PyValue,
}

/// What the generator knows about one field name.
#[derive(Debug, Clone, Default)]
pub struct FieldRules {
    /// Required multiple.
    pub multiple_of: Option<i64>,
    /// Inclusive bounds.
    pub min: Option<i64>,
    /// Inclusive bounds.
    pub max: Option<i64>,
    /// Pinned by `==` or `in`.
    pub pinned: bool,
}

/// Inputs to [`generate`].
#[derive(Debug, Clone)]
pub struct ShapeProblem {
    /// The visible rows (all with the same structure).
    pub rows: Vec<PyValue>,
    /// Field name of each top-level item of a row (or of the row itself if it is a scalar).
    pub names: Vec<Option<String>>,
    /// `assert` constraints, by field name.
    pub constraints: Vec<(String, ConstraintKind)>,
    /// Integer values from `get_init_inputs()`.
    pub init_values: Vec<i64>,
    /// Seed for the choices the rules make.
    pub seed: u64,
}

/// Generates held-out rows. Errors say why the rows cannot be handled.
pub fn generate(p: &ShapeProblem) -> Result<Vec<GeneratedRow>, String> {
    let layout = Layout::read(p)?;
    let mut rng = Rng(p.seed ^ 0x6b67_6865_6c64_6f75);
    let mut drafts = layout.drafts(&mut rng);
    layout.settle(&mut drafts);
    Ok(layout.rows(&drafts))
}

/// Renders rows as a multi-line Python list, one row per line with its category comment.
/// `indent` is the indentation of the line holding the opening bracket.
pub fn render_list(rows: &[GeneratedRow], indent: &str) -> String {
    let mut s = String::from("[\n");
    for r in rows {
        s.push_str(indent);
        s.push_str("    ");
        s.push_str(&r.value.render());
        s.push_str(",  # ");
        s.push_str(r.category);
        s.push_str(": ");
        s.push_str(&r.note.replace('\n', " "));
        s.push('\n');
    }
    s.push_str(indent);
    s.push(']');
    s
}

#[cfg(test)]
mod tests;
