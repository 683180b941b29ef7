//! The visible rows read for drafting: their leaves, the classes and which of them are
//! dimensions, the template rows; and the final rows, drafts crossed with the categorical
//! combinations.

use kg_inject::PyValue;

use super::classes::{Class, classes_of};
use super::drafts::Draft;
use super::paths::{Leaf, get, int_at, named_leaves, set, structure};
use super::{GeneratedRow, MAX_INPUT_BYTES, ShapeProblem};

/// Elements one shape may hold: the input budget at 4 bytes × 3 tensors.
const BUDGET_ELEMS: f64 = MAX_INPUT_BYTES / (4.0 * 3.0);

/// What the rules know of a problem's visible rows.
pub(super) struct Layout<'p> {
    pub(super) p: &'p ShapeProblem,
    pub(super) leaves: Vec<Leaf>,
    /// Leaves that are not integers in every row (dtypes, flags, strings).
    pub(super) cat_leaves: Vec<usize>,
    pub(super) classes: Vec<Class>,
    /// The classes that move (not kept), in leaf order.
    pub(super) dims: Vec<usize>,
    /// Template rows: the smallest, median and largest by the product of their dimensions.
    pub(super) small: usize,
    pub(super) mid: usize,
    pub(super) big: usize,
    /// The dimension with the largest visible value.
    pub(super) dominant: usize,
    pub(super) first_dim: usize,
    pub(super) last_dim: usize,
}

impl<'p> Layout<'p> {
    /// Reads the rows; errors say why they cannot be handled.
    pub(super) fn read(p: &'p ShapeProblem) -> Result<Self, String> {
        let Some(first) = p.rows.first() else {
            return Err("the shape list is empty".into());
        };
        let shape = structure(first);
        if p.rows.iter().any(|r| structure(r) != shape) {
            return Err("the visible rows do not all have the same structure".into());
        }
        let leaves = named_leaves(first, &p.names);

        // Integer leaves (in every row) vs categorical leaves.
        let int_leaves: Vec<usize> = (0..leaves.len())
            .filter(|&i| p.rows.iter().all(|r| int_at(r, &leaves[i].path).is_some()))
            .collect();
        if int_leaves.is_empty() {
            return Err("the rows hold no integer sizes to vary".into());
        }
        let cat_leaves: Vec<usize> = (0..leaves.len())
            .filter(|i| !int_leaves.contains(i))
            .collect();

        let classes = classes_of(p, &leaves, &int_leaves);
        let dims: Vec<usize> = (0..classes.len()).filter(|&i| !classes[i].keep).collect();
        if dims.is_empty() {
            return Err(
                "every integer field is a tuning knob, pinned or constant; nothing to vary".into(),
            );
        }
        let (small, mid, big) = templates(p, &leaves, &classes, &dims);
        let dominant = *dims
            .iter()
            .max_by_key(|&&d| classes[d].values.iter().copied().max().unwrap_or(0))
            .unwrap_or(&dims[0]);
        let first_dim = dims[0];
        let last_dim = dims[dims.len() - 1];
        Ok(Layout {
            p,
            leaves,
            cat_leaves,
            classes,
            dims,
            small,
            mid,
            big,
            dominant,
            first_dim,
            last_dim,
        })
    }

    /// Every class's value in visible row `row`.
    pub(super) fn base(&self, row: usize) -> Vec<i64> {
        (0..self.classes.len())
            .map(|c| self.classes[c].values[row])
            .collect()
    }

    /// Class `c`'s field name, or `dim<c>`.
    pub(super) fn name_of(&self, c: usize) -> String {
        self.classes[c]
            .name
            .clone()
            .unwrap_or_else(|| format!("dim{c}"))
    }

    /// Whether the shape stays within the input budget.
    pub(super) fn fits(&self, vals: &[i64]) -> bool {
        self.dims
            .iter()
            .map(|&d| vals[d].max(1) as f64)
            .product::<f64>()
            <= BUDGET_ELEMS
    }

    /// Largest value of class `c` that keeps the shape within budget, others fixed.
    pub(super) fn cap_for(&self, vals: &[i64], c: usize) -> i64 {
        let others: f64 = self
            .dims
            .iter()
            .filter(|&&d| d != c)
            .map(|&d| vals[d].max(1) as f64)
            .product();
        (BUDGET_ELEMS / others).floor().max(1.0) as i64
    }

    /// The dimensions' values, as compared for newness.
    pub(super) fn render_dims(&self, vals: &[i64]) -> String {
        self.dims
            .iter()
            .map(|d| vals[*d].to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The visible row a draft's non-dimension leaves come from.
    fn template_row(&self, d: &Draft) -> usize {
        match d.category {
            "edge" | "scale-down" => self.small,
            "scale-up" => self.big,
            _ => self.mid,
        }
    }

    /// The rows: each draft on its template row, crossed with every distinct categorical
    /// combination of the visible rows (up to 4; beyond that they cycle).
    pub(super) fn rows(&self, drafts: &[Draft]) -> Vec<GeneratedRow> {
        let mut combos: Vec<Vec<PyValue>> = Vec::new();
        for r in &self.p.rows {
            let combo: Vec<PyValue> = self
                .cat_leaves
                .iter()
                .map(|li| {
                    get(r, &self.leaves[*li].path)
                        .cloned()
                        .unwrap_or(PyValue::None)
                })
                .collect();
            if !combos.contains(&combo) {
                combos.push(combo);
            }
        }
        let mut out = Vec::new();
        for (i, d) in drafts.iter().enumerate() {
            let chosen: Vec<&Vec<PyValue>> = if combos.len() <= 4 {
                combos.iter().collect()
            } else {
                vec![&combos[i % combos.len()]]
            };
            for combo in chosen {
                let mut v = self.p.rows[self.template_row(d)].clone();
                for (c, class) in self.classes.iter().enumerate() {
                    for li in &class.leaves {
                        set(&mut v, &self.leaves[*li].path, PyValue::Int(d.vals[c]));
                    }
                }
                for (k, li) in self.cat_leaves.iter().enumerate() {
                    set(&mut v, &self.leaves[*li].path, combo[k].clone());
                }
                out.push(GeneratedRow {
                    category: d.category,
                    note: d.note.clone(),
                    value: v,
                });
            }
        }
        out
    }
}

/// The smallest, median and largest visible rows by the product of their dimensions.
fn templates(
    p: &ShapeProblem,
    leaves: &[Leaf],
    classes: &[Class],
    dims: &[usize],
) -> (usize, usize, usize) {
    let size = |r: &PyValue| -> f64 {
        dims.iter()
            .map(|&d| {
                int_at(r, &leaves[classes[d].leaves[0]].path)
                    .unwrap_or(1)
                    .max(1) as f64
            })
            .product()
    };
    let mut order: Vec<usize> = (0..p.rows.len()).collect();
    order.sort_by(|a, b| size(&p.rows[*a]).total_cmp(&size(&p.rows[*b])));
    (order[0], order[order.len() / 2], order[order.len() - 1])
}
