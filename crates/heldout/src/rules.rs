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

use std::collections::BTreeSet;

use kg_inject::{ConstraintKind, PyValue};

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

#[derive(Debug, Clone)]
struct Leaf {
    path: Vec<usize>,
    name: Option<String>,
}

#[derive(Debug, Clone)]
struct Class {
    leaves: Vec<usize>,
    values: Vec<i64>,
    name: Option<String>,
    keep: bool,
    rules: FieldRules,
}

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

fn structure(v: &PyValue) -> String {
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

fn get<'a>(v: &'a PyValue, path: &[usize]) -> Option<&'a PyValue> {
    match path.split_first() {
        None => Some(v),
        Some((i, rest)) => get(v.items()?.get(*i)?, rest),
    }
}

fn set(v: &mut PyValue, path: &[usize], new: PyValue) {
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

fn int_at(v: &PyValue, path: &[usize]) -> Option<i64> {
    match get(v, path)? {
        PyValue::Int(i) => Some(*i),
        _ => None,
    }
}

/// A tiny deterministic generator (splitmix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn pick(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn is_prime(n: i64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 1;
    }
    true
}

fn prime_at_or_below(n: i64) -> i64 {
    let mut k = n.max(3);
    while k > 3 && !is_prime(k) {
        k -= 1;
    }
    k
}

fn prime_above(n: i64) -> i64 {
    let mut k = n.max(2) + 1;
    while !is_prime(k) {
        k += 1;
    }
    k
}

fn is_knob(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    [
        "block", "warps", "stages", "tile", "group", "num_ctas", "chunk",
    ]
    .iter()
    .any(|k| l.contains(k))
}

fn production_table(name: Option<&str>, median: i64) -> Vec<i64> {
    let l = name.unwrap_or("").to_ascii_lowercase();
    let has = |keys: &[&str]| keys.iter().any(|k| l == *k || l.contains(k));
    if has(&["head_dim", "head_size", "headdim"]) {
        vec![64, 80, 96, 128, 256]
    } else if has(&["heads", "num_head", "nheads", "n_head"]) {
        vec![8, 16, 32, 40, 64]
    } else if has(&["vocab"]) {
        vec![32000, 32064, 128256, 151936]
    } else if has(&["expert"]) {
        vec![8, 16, 64, 128]
    } else if has(&["topk", "top_k"]) {
        vec![1, 2, 4, 8]
    } else if has(&["batch", "num_seqs", "num_reqs", "bs"]) {
        vec![1, 2, 4, 8, 16, 32, 64]
    } else if has(&["seq", "token", "len", "ctx"]) {
        vec![128, 512, 1024, 2048, 4096, 8192]
    } else if median >= 768 {
        // Hidden and intermediate sizes of Llama-2/3, Mistral, Qwen2 and DeepSeek models.
        vec![
            1024, 2048, 2560, 3072, 4096, 5120, 7168, 8192, 11008, 13824, 14336, 18944, 28672,
        ]
    } else {
        vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    }
}

fn nearest_index(table: &[i64], v: i64) -> usize {
    let lv = (v.max(1) as f64).ln();
    let mut best = 0;
    let mut best_d = f64::INFINITY;
    for (i, t) in table.iter().enumerate() {
        let d = ((*t as f64).ln() - lv).abs();
        if d < best_d {
            best_d = d;
            best = i;
        }
    }
    best
}

fn median(v: &[i64]) -> i64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s[s.len() / 2]
}

/// Generates held-out rows. Errors say why the rows cannot be handled.
pub fn generate(p: &ShapeProblem) -> Result<Vec<GeneratedRow>, String> {
    let Some(first) = p.rows.first() else {
        return Err("the shape list is empty".into());
    };
    let shape = structure(first);
    if p.rows.iter().any(|r| structure(r) != shape) {
        return Err("the visible rows do not all have the same structure".into());
    }
    let mut paths = Vec::new();
    leaves_of(first, &mut Vec::new(), &mut paths);
    let leaves: Vec<Leaf> = paths
        .into_iter()
        .map(|path| {
            let top = path.first().copied().unwrap_or(0);
            let name = p.names.get(top).cloned().flatten().map(|n| {
                if path.len() > 1 {
                    format!("{n}{:?}", &path[1..])
                } else {
                    n
                }
            });
            Leaf { path, name }
        })
        .collect();

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

    // Group integer leaves into classes of equal values across all rows.
    let mut classes: Vec<Class> = Vec::new();
    for &li in &int_leaves {
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
            for (n, k) in &p.constraints {
                if n != name {
                    continue;
                }
                match k {
                    ConstraintKind::MultipleOf(m) if *m > 0 => {
                        let cur = c.rules.multiple_of.unwrap_or(1);
                        c.rules.multiple_of = Some(lcm(cur, *m));
                    }
                    ConstraintKind::AtMost(m) => {
                        c.rules.max = Some(c.rules.max.map_or(*m, |x| x.min(*m)))
                    }
                    ConstraintKind::AtLeast(m) => {
                        c.rules.min = Some(c.rules.min.map_or(*m, |x| x.max(*m)))
                    }
                    ConstraintKind::OneOf(_) | ConstraintKind::Equals(_) => c.rules.pinned = true,
                    _ => {}
                }
            }
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
    let dims: Vec<usize> = (0..classes.len()).filter(|&i| !classes[i].keep).collect();
    if dims.is_empty() {
        return Err(
            "every integer field is a tuning knob, pinned or constant; nothing to vary".into(),
        );
    }

    // Template rows by size.
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
    let small = order[0];
    let mid = order[order.len() / 2];
    let big = order[order.len() - 1];
    let dominant = *dims
        .iter()
        .max_by_key(|&&d| classes[d].values.iter().copied().max().unwrap_or(0))
        .unwrap_or(&dims[0]);
    let first_dim = dims[0];
    let last_dim = dims[dims.len() - 1];

    let mut rng = Rng(p.seed ^ 0x6b67_6865_6c64_6f75);
    let row_val = |row: usize, c: usize| classes[c].values[row];
    let budget_elems = MAX_INPUT_BYTES / (4.0 * 3.0);
    let fits = |vals: &[i64]| -> bool {
        dims.iter().map(|&d| vals[d].max(1) as f64).product::<f64>() <= budget_elems
    };
    // Largest value of class `c` that keeps the shape within budget, others fixed.
    let cap_for = |vals: &[i64], c: usize| -> i64 {
        let others: f64 = dims
            .iter()
            .filter(|&&d| d != c)
            .map(|&d| vals[d].max(1) as f64)
            .product();
        (budget_elems / others).floor().max(1.0) as i64
    };

    struct Draft {
        category: &'static str,
        note: String,
        vals: Vec<i64>,
        prime: bool,
    }
    let base = |row: usize| -> Vec<i64> { (0..classes.len()).map(|c| row_val(row, c)).collect() };
    let name_of = |c: usize| classes[c].name.clone().unwrap_or_else(|| format!("dim{c}"));
    let mut drafts: Vec<Draft> = Vec::new();

    // edge
    {
        let mut v = base(small);
        v[first_dim] = 1;
        drafts.push(Draft {
            category: "edge",
            note: format!("{}=1 on the smallest visible shape", name_of(first_dim)),
            vals: v,
            prime: false,
        });
    }
    // scale-up
    {
        let mut v = base(big);
        let factors = [2i64, 3, 4];
        let want = factors[rng.pick(3)];
        let maxv = classes[dominant].values.iter().copied().max().unwrap_or(1);
        let cap = cap_for(&v, dominant);
        let mut f = want;
        while f > 2 && maxv * f > cap {
            f -= 1;
        }
        v[dominant] = (maxv * f).min(cap);
        let note = if v[dominant] < maxv * f {
            format!(
                "{} capped at {} by the 2 GB input budget (wanted {}x the largest visible value)",
                name_of(dominant),
                v[dominant],
                f
            )
        } else {
            format!("{} {}x the largest visible value", name_of(dominant), f)
        };
        drafts.push(Draft {
            category: "scale-up",
            note,
            vals: v,
            prime: false,
        });
    }
    // scale-down
    {
        let mut v = base(small);
        let f = [2i64, 3, 4][rng.pick(3)];
        let minv = classes[dominant].values.iter().copied().min().unwrap_or(1);
        v[dominant] = ((minv + f - 1) / f).max(1);
        drafts.push(Draft {
            category: "scale-down",
            note: format!(
                "{} 1/{} of the smallest visible value",
                name_of(dominant),
                f
            ),
            vals: v,
            prime: false,
        });
    }
    // alignment-stress x2
    {
        let mut a = base(mid);
        for &d in &dims {
            let m = median(&classes[d].values);
            let jitter = (m / 8).max(1);
            let target = m - (rng.next() % jitter as u64) as i64;
            a[d] = prime_at_or_below(target.max(3));
        }
        drafts.push(Draft {
            category: "alignment-stress",
            note: "every size a prime at or below the visible median (no tile multiple)".into(),
            vals: a,
            prime: true,
        });
        let mut b = base(big);
        for &d in &dims {
            let m = classes[d].values.iter().copied().max().unwrap_or(1);
            let jitter = (m / 4).max(1);
            b[d] = prime_above(m + (rng.next() % jitter as u64) as i64);
        }
        if !fits(&b) {
            let cap = cap_for(&b, dominant);
            b[dominant] = prime_at_or_below(cap.max(3));
        }
        drafts.push(Draft {
            category: "alignment-stress",
            note: "every size a prime just above the visible maximum".into(),
            vals: b,
            prime: true,
        });
    }
    // asymmetric
    {
        let mut v = base(mid);
        let note = if dims.len() >= 2 {
            let tall = classes[first_dim].values.iter().copied().max().unwrap_or(1) * 8;
            v[first_dim] = tall.min(cap_for(&v, first_dim));
            for &d in &dims[1..] {
                let minv = classes[d].values.iter().copied().min().unwrap_or(1);
                v[d] = (minv / 4).max(1);
            }
            format!(
                "tall-skinny: {} 8x the visible maximum, other sizes 1/4 of their minimum",
                name_of(first_dim)
            )
        } else {
            let maxv = classes[last_dim].values.iter().copied().max().unwrap_or(1);
            v[last_dim] = (maxv * 2 + 1).min(cap_for(&v, last_dim));
            format!(
                "1-D task: {} = 2x the visible maximum + 1 (odd)",
                name_of(last_dim)
            )
        };
        drafts.push(Draft {
            category: "asymmetric",
            note,
            vals: v,
            prime: false,
        });
    }
    // production x2
    for k in 0..2 {
        let mut v = base(mid);
        let mut parts = Vec::new();
        for &d in &dims {
            let m = median(&classes[d].values);
            let table = production_table(classes[d].name.as_deref(), m);
            let i = (nearest_index(&table, m) + k).min(table.len() - 1);
            v[d] = table[i];
            parts.push(format!("{}={}", name_of(d), table[i]));
        }
        let mut guard = 0;
        while !fits(&v) && guard < 64 {
            guard += 1;
            // Step the dominant size down its table until the shape fits.
            let m = v[dominant];
            let table = production_table(classes[dominant].name.as_deref(), m);
            let i = nearest_index(&table, m);
            v[dominant] = if i > 0 { table[i - 1] } else { (m / 2).max(1) };
        }
        drafts.push(Draft {
            category: "production",
            note: format!("LLM dimension table: {}", parts.join(", ")),
            vals: v,
            prime: false,
        });
    }

    // Apply the constraints, then make every row new.
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let render_dims = |vals: &[i64]| -> String {
        dims.iter()
            .map(|d| vals[*d].to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    for r in 0..p.rows.len() {
        seen.insert(render_dims(&base(r)));
    }
    for d in &mut drafts {
        for &c in &dims {
            let rules = &classes[c].rules;
            let mut x = d.vals[c];
            if let Some(m) = rules.multiple_of {
                if d.prime {
                    // k × an odd prime: a multiple of k but of no larger power-of-two tile.
                    let q = prime_at_or_below((x / m).max(3));
                    x = m * q;
                } else {
                    x = ((x + m - 1) / m).max(1) * m;
                }
            }
            if let Some(lo) = rules.min {
                x = x.max(lo);
            }
            if let Some(hi) = rules.max {
                x = x.min(hi);
                if let Some(m) = rules.multiple_of {
                    x -= x % m;
                }
            }
            d.vals[c] = x.max(1);
        }
        let before = d.vals[dominant];
        let mut guard = 0;
        while seen.contains(&render_dims(&d.vals)) && guard < 100 {
            guard += 1;
            let step = classes[dominant].rules.multiple_of.unwrap_or(1);
            let cur = d.vals[dominant];
            let next = if d.prime && step == 1 {
                prime_above(cur)
            } else {
                cur + step
            };
            if classes[dominant].rules.max.is_some_and(|hi| next > hi) {
                d.vals[dominant] = (cur - step).max(1);
            } else {
                d.vals[dominant] = next;
            }
        }
        if d.vals[dominant] != before {
            d.note.push_str(&format!(
                "; {} moved {before} -> {} to differ from the visible shapes",
                name_of(dominant),
                d.vals[dominant]
            ));
        }
        seen.insert(render_dims(&d.vals));
    }

    // Categorical combinations of the visible rows.
    let mut combos: Vec<Vec<PyValue>> = Vec::new();
    for r in &p.rows {
        let combo: Vec<PyValue> = cat_leaves
            .iter()
            .map(|li| get(r, &leaves[*li].path).cloned().unwrap_or(PyValue::None))
            .collect();
        if !combos.contains(&combo) {
            combos.push(combo);
        }
    }
    let template_row = |d: &Draft| -> usize {
        match d.category {
            "edge" | "scale-down" => small,
            "scale-up" => big,
            _ => mid,
        }
    };
    let mut out = Vec::new();
    for (i, d) in drafts.iter().enumerate() {
        let chosen: Vec<&Vec<PyValue>> = if combos.len() <= 4 {
            combos.iter().collect()
        } else {
            vec![&combos[i % combos.len()]]
        };
        for combo in chosen {
            let mut v = p.rows[template_row(d)].clone();
            for (c, class) in classes.iter().enumerate() {
                for li in &class.leaves {
                    set(&mut v, &leaves[*li].path, PyValue::Int(d.vals[c]));
                }
            }
            for (k, li) in cat_leaves.iter().enumerate() {
                set(&mut v, &leaves[*li].path, combo[k].clone());
            }
            out.push(GeneratedRow {
                category: d.category,
                note: d.note.clone(),
                value: v,
            });
        }
    }
    Ok(out)
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a.abs() } else { gcd(b, a % b) }
}

fn lcm(a: i64, b: i64) -> i64 {
    (a / gcd(a, b)).saturating_mul(b)
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
mod tests {
    use super::*;

    fn t(items: &[i64]) -> PyValue {
        PyValue::Tuple(items.iter().map(|i| PyValue::Int(*i)).collect())
    }

    fn problem(rows: Vec<PyValue>, names: &[&str]) -> ShapeProblem {
        ShapeProblem {
            rows,
            names: names.iter().map(|n| Some(n.to_string())).collect(),
            constraints: vec![],
            init_values: vec![],
            seed: 0,
        }
    }

    #[test]
    fn eight_rows_in_the_six_categories_all_new_and_deterministic() {
        let p = problem(
            vec![t(&[4, 256]), t(&[8, 1024]), t(&[32, 2048])],
            &["batch", "hidden"],
        );
        let a = generate(&p).unwrap();
        assert_eq!(a.len(), 8);
        let cats: Vec<&str> = a.iter().map(|r| r.category).collect();
        assert_eq!(
            cats,
            [
                "edge",
                "scale-up",
                "scale-down",
                "alignment-stress",
                "alignment-stress",
                "asymmetric",
                "production",
                "production"
            ]
        );
        let rendered: BTreeSet<String> = a.iter().map(|r| r.value.render()).collect();
        assert_eq!(rendered.len(), 8, "{rendered:?}");
        for v in ["(4, 256)", "(8, 1024)", "(32, 2048)"] {
            assert!(!rendered.contains(v));
        }
        assert_eq!(a, generate(&p).unwrap());
        let other = generate(&ShapeProblem {
            seed: 7,
            ..p.clone()
        })
        .unwrap();
        assert_ne!(a, other, "the seed changes the choices");
        // alignment-stress sizes are primes, hence not multiples of 32.
        for r in a.iter().filter(|r| r.category == "alignment-stress") {
            for it in r.value.items().unwrap() {
                let PyValue::Int(x) = it else { panic!() };
                assert!(is_prime(*x), "{x}");
            }
        }
        // scale-up is 2–4x the largest visible hidden size.
        let PyValue::Int(h) = a[1].value.items().unwrap()[1] else {
            panic!()
        };
        assert!((4096..=8192).contains(&h), "{h}");
    }

    #[test]
    fn constraints_and_knobs_are_honoured() {
        let mut p = problem(
            vec![
                t(&[128, 1024, 64]),
                t(&[256, 2048, 64]),
                t(&[512, 4096, 128]),
            ],
            &["n", "hidden", "BLOCK_SIZE"],
        );
        p.constraints = vec![
            ("hidden".into(), ConstraintKind::MultipleOf(16)),
            ("hidden".into(), ConstraintKind::AtMost(8192)),
        ];
        let rows = generate(&p).unwrap();
        for r in &rows {
            let items = r.value.items().unwrap();
            let (PyValue::Int(h), PyValue::Int(b)) = (&items[1], &items[2]) else {
                panic!()
            };
            assert_eq!(h % 16, 0, "{}", r.value.render());
            assert!(*h <= 8192 && *h >= 16, "{}", r.value.render());
            assert!([64, 128].contains(b), "BLOCK_SIZE kept from a template row");
            if r.category == "alignment-stress" {
                assert_ne!(h % 32, 0, "16 × odd prime is no multiple of 32: {h}");
            }
        }
    }

    #[test]
    fn linked_dims_move_together_and_init_values_stay() {
        let row = |b: i64| {
            PyValue::Tuple(vec![
                PyValue::List(vec![PyValue::Int(b), PyValue::Int(128)]),
                PyValue::List(vec![PyValue::Int(b), PyValue::Int(128)]),
            ])
        };
        let mut p = problem(
            vec![row(512), row(1024), row(2048)],
            &["x_shape", "y_shape"],
        );
        p.init_values = vec![128, 2048];
        for r in generate(&p).unwrap() {
            let s = r.value.render();
            let items = r.value.items().unwrap();
            assert_eq!(items[0], items[1], "{s}");
            assert!(s.contains(", 128]"), "{s}");
        }
    }

    #[test]
    fn categorical_fields_are_crossed() {
        let row = |n: i64, d: &str| {
            PyValue::Tuple(vec![
                PyValue::Int(n),
                PyValue::Int(1024),
                PyValue::Str(d.into()),
            ])
        };
        let p = problem(
            vec![row(98432, "float16"), row(98432, "float32")],
            &["SIZE", "BLOCK_SIZE", "dtype_str"],
        );
        let rows = generate(&p).unwrap();
        assert_eq!(rows.len(), 16);
        assert!(rows.iter().all(|r| r.value.render().contains(", 1024, '")));
        assert_eq!(
            rows.iter()
                .filter(|r| r.value.render().ends_with("'float16')"))
                .count(),
            8
        );
    }

    #[test]
    fn memory_budget_caps_scale_up() {
        let p = problem(
            vec![t(&[16384, 4096]), t(&[8192, 4096])],
            &["tokens", "hidden"],
        );
        for r in generate(&p).unwrap() {
            let items = r.value.items().unwrap();
            let n: f64 = items.iter().map(|x| x.as_f64().unwrap()).product();
            assert!(
                n * 12.0 <= MAX_INPUT_BYTES,
                "{} over budget",
                r.value.render()
            );
        }
    }

    #[test]
    fn rows_without_sizes_are_refused() {
        let p = problem(vec![PyValue::Tuple(vec![PyValue::Str("a".into())])], &["x"]);
        assert!(generate(&p).unwrap_err().contains("no integer"));
    }
}
