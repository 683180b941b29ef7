//! Reading and writing a row's leaves (its non-container values) by path.

use kg_inject::PyValue;

/// A leaf of the rows: its path, and its field name when the row's item has one.
#[derive(Debug, Clone)]
pub(super) struct Leaf {
    pub(super) path: Vec<usize>,
    pub(super) name: Option<String>,
}

/// The leaves of `row`, each named after its top-level item (`x_shape[1]` for an item's
/// inner leaf).
pub(super) fn named_leaves(row: &PyValue, names: &[Option<String>]) -> Vec<Leaf> {
    let mut paths = Vec::new();
    leaves_of(row, &mut Vec::new(), &mut paths);
    paths
        .into_iter()
        .map(|path| {
            let top = path.first().copied().unwrap_or(0);
            let name = names.get(top).cloned().flatten().map(|n| {
                if path.len() > 1 {
                    format!("{n}{:?}", &path[1..])
                } else {
                    n
                }
            });
            Leaf { path, name }
        })
        .collect()
}

/// Appends the path of every leaf of `v` below `path` to `out`, in order.
fn leaves_of(v: &PyValue, path: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    match v {
        PyValue::Tuple(items) | PyValue::List(items) => {
            for (i, it) in items.iter().enumerate() {
                path.push(i);
                leaves_of(it, path, out);
                path.pop();
            }
        }
        _ => out.push(path.clone()),
    }
}

/// The containers of a row with its leaves as `*` (`(*,[*,*])`): rows must all share it.
pub(super) fn structure(v: &PyValue) -> String {
    match v {
        PyValue::Tuple(items) => format!(
            "({})",
            items.iter().map(structure).collect::<Vec<_>>().join(",")
        ),
        PyValue::List(items) => format!(
            "[{}]",
            items.iter().map(structure).collect::<Vec<_>>().join(",")
        ),
        _ => "*".into(),
    }
}

/// The value at `path`.
pub(super) fn get<'a>(v: &'a PyValue, path: &[usize]) -> Option<&'a PyValue> {
    match path.split_first() {
        None => Some(v),
        Some((i, rest)) => get(v.items()?.get(*i)?, rest),
    }
}

/// Replaces the value at `path` (nothing when there is none).
pub(super) fn set(v: &mut PyValue, path: &[usize], new: PyValue) {
    match path.split_first() {
        None => *v = new,
        Some((i, rest)) => {
            if let PyValue::Tuple(items) | PyValue::List(items) = v
                && let Some(it) = items.get_mut(*i)
            {
                set(it, rest, new);
            }
        }
    }
}

/// The integer at `path`, when it is one.
pub(super) fn int_at(v: &PyValue, path: &[usize]) -> Option<i64> {
    match get(v, path)? {
        PyValue::Int(i) => Some(*i),
        _ => None,
    }
}
