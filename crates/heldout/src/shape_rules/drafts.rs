//! Drafts of the held-out rows, category by category, then settled: the constraints applied
//! and every row made to differ from the visible ones and from each other.

use std::collections::BTreeSet;

use super::layout::Layout;
use super::numbers::{Rng, median, prime_above, prime_at_or_below};

/// A row's dimension values before they become a row.
pub(super) struct Draft {
    pub(super) category: &'static str,
    pub(super) note: String,
    /// One value per class.
    pub(super) vals: Vec<i64>,
    /// Its sizes are primes (alignment stress), kept prime where a constraint allows.
    prime: bool,
}

impl Layout<'_> {
    /// The drafts in [`CATEGORIES`](super::CATEGORIES) order; `rng` is drawn in that order.
    pub(super) fn drafts(&self, rng: &mut Rng) -> Vec<Draft> {
        let mut drafts = vec![self.edge(), self.scale_up(rng), self.scale_down(rng)];
        drafts.extend(self.alignment_stress(rng));
        drafts.push(self.asymmetric());
        for k in 0..2 {
            drafts.push(self.production(k));
        }
        drafts
    }

    fn edge(&self) -> Draft {
        let mut v = self.base(self.small);
        v[self.first_dim] = 1;
        Draft {
            category: "edge",
            note: format!(
                "{}=1 on the smallest visible shape",
                self.name_of(self.first_dim)
            ),
            vals: v,
            prime: false,
        }
    }

    fn scale_up(&self, rng: &mut Rng) -> Draft {
        let dominant = self.dominant;
        let mut v = self.base(self.big);
        let factors = [2i64, 3, 4];
        let want = factors[rng.pick(3)];
        let maxv = self.classes[dominant]
            .values
            .iter()
            .copied()
            .max()
            .unwrap_or(1);
        let cap = self.cap_for(&v, dominant);
        let mut f = want;
        while f > 2 && maxv * f > cap {
            f -= 1;
        }
        v[dominant] = (maxv * f).min(cap);
        let note = if v[dominant] < maxv * f {
            format!(
                "{} capped at {} by the 2 GB input budget (wanted {}x the largest visible value)",
                self.name_of(dominant),
                v[dominant],
                f
            )
        } else {
            format!(
                "{} {}x the largest visible value",
                self.name_of(dominant),
                f
            )
        };
        Draft {
            category: "scale-up",
            note,
            vals: v,
            prime: false,
        }
    }

    fn scale_down(&self, rng: &mut Rng) -> Draft {
        let dominant = self.dominant;
        let mut v = self.base(self.small);
        let f = [2i64, 3, 4][rng.pick(3)];
        let minv = self.classes[dominant]
            .values
            .iter()
            .copied()
            .min()
            .unwrap_or(1);
        v[dominant] = ((minv + f - 1) / f).max(1);
        Draft {
            category: "scale-down",
            note: format!(
                "{} 1/{} of the smallest visible value",
                self.name_of(dominant),
                f
            ),
            vals: v,
            prime: false,
        }
    }

    /// Two rows of primes: at or below the visible median, and just above the maximum.
    fn alignment_stress(&self, rng: &mut Rng) -> [Draft; 2] {
        let mut a = self.base(self.mid);
        for &d in &self.dims {
            let m = median(&self.classes[d].values);
            let jitter = (m / 8).max(1);
            let target = m - (rng.next() % jitter as u64) as i64;
            a[d] = prime_at_or_below(target.max(3));
        }
        let mut b = self.base(self.big);
        for &d in &self.dims {
            let m = self.classes[d].values.iter().copied().max().unwrap_or(1);
            let jitter = (m / 4).max(1);
            b[d] = prime_above(m + (rng.next() % jitter as u64) as i64);
        }
        if !self.fits(&b) {
            let cap = self.cap_for(&b, self.dominant);
            b[self.dominant] = prime_at_or_below(cap.max(3));
        }
        [
            Draft {
                category: "alignment-stress",
                note: "every size a prime at or below the visible median (no tile multiple)".into(),
                vals: a,
                prime: true,
            },
            Draft {
                category: "alignment-stress",
                note: "every size a prime just above the visible maximum".into(),
                vals: b,
                prime: true,
            },
        ]
    }

    fn asymmetric(&self) -> Draft {
        let (first_dim, last_dim) = (self.first_dim, self.last_dim);
        let mut v = self.base(self.mid);
        let note = if self.dims.len() >= 2 {
            let tall = self.classes[first_dim]
                .values
                .iter()
                .copied()
                .max()
                .unwrap_or(1)
                * 8;
            v[first_dim] = tall.min(self.cap_for(&v, first_dim));
            for &d in &self.dims[1..] {
                let minv = self.classes[d].values.iter().copied().min().unwrap_or(1);
                v[d] = (minv / 4).max(1);
            }
            format!(
                "tall-skinny: {} 8x the visible maximum, other sizes 1/4 of their minimum",
                self.name_of(first_dim)
            )
        } else {
            let maxv = self.classes[last_dim]
                .values
                .iter()
                .copied()
                .max()
                .unwrap_or(1);
            v[last_dim] = (maxv * 2 + 1).min(self.cap_for(&v, last_dim));
            format!(
                "1-D task: {} = 2x the visible maximum + 1 (odd)",
                self.name_of(last_dim)
            )
        };
        Draft {
            category: "asymmetric",
            note,
            vals: v,
            prime: false,
        }
    }

    /// Production row `k` (0 or 1): each dimension from its LLM table, `k` steps above the
    /// entry nearest the visible median.
    fn production(&self, k: usize) -> Draft {
        let dominant = self.dominant;
        let mut v = self.base(self.mid);
        let mut parts = Vec::new();
        for &d in &self.dims {
            let m = median(&self.classes[d].values);
            let table = production_table(self.classes[d].name.as_deref(), m);
            let i = (nearest_index(&table, m) + k).min(table.len() - 1);
            v[d] = table[i];
            parts.push(format!("{}={}", self.name_of(d), table[i]));
        }
        let mut guard = 0;
        while !self.fits(&v) && guard < 64 {
            guard += 1;
            // Step the dominant size down its table until the shape fits.
            let m = v[dominant];
            let table = production_table(self.classes[dominant].name.as_deref(), m);
            let i = nearest_index(&table, m);
            v[dominant] = if i > 0 { table[i - 1] } else { (m / 2).max(1) };
        }
        Draft {
            category: "production",
            note: format!("LLM dimension table: {}", parts.join(", ")),
            vals: v,
            prime: false,
        }
    }

    /// Applies the constraints, then makes every row new: a row equal to a visible one or an
    /// earlier draft moves its dominant size.
    pub(super) fn settle(&self, drafts: &mut [Draft]) {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        for r in 0..self.p.rows.len() {
            seen.insert(self.render_dims(&self.base(r)));
        }
        for d in drafts {
            self.constrain(d);
            self.make_new(d, &seen);
            seen.insert(self.render_dims(&d.vals));
        }
    }

    /// Each dimension to its multiple and within its bounds.
    fn constrain(&self, d: &mut Draft) {
        for &c in &self.dims {
            let rules = &self.classes[c].rules;
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
    }

    /// Steps the dominant size (by its multiple, or to the next prime) until the row is not
    /// in `seen`, noting the move.
    fn make_new(&self, d: &mut Draft, seen: &BTreeSet<String>) {
        let dominant = self.dominant;
        let rules = &self.classes[dominant].rules;
        let before = d.vals[dominant];
        let mut guard = 0;
        while seen.contains(&self.render_dims(&d.vals)) && guard < 100 {
            guard += 1;
            let step = rules.multiple_of.unwrap_or(1);
            let cur = d.vals[dominant];
            let next = if d.prime && step == 1 {
                prime_above(cur)
            } else {
                cur + step
            };
            if rules.max.is_some_and(|hi| next > hi) {
                d.vals[dominant] = (cur - step).max(1);
            } else {
                d.vals[dominant] = next;
            }
        }
        if d.vals[dominant] != before {
            d.note.push_str(&format!(
                "; {} moved {before} -> {} to differ from the visible shapes",
                self.name_of(dominant),
                d.vals[dominant]
            ));
        }
    }
}

/// Production values of a dimension, by its field name (else by its visible median).
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

/// The index of the entry of `table` nearest `v` on a log scale.
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
