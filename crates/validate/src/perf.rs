//! The perf stage's numbers: scrape benchmark output (markdown tables and `[perf] … avg: N us`
//! lines), classify columns, keep the best repeat per cell, compare head with base per column
//! (median ratio over matched rows) with a bootstrap confidence interval.

use std::collections::BTreeMap;

use kg_contract::report::{PerfColumn, PerfRow};

/// What a column measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// Lower is better (`us`, `ms`, `ns`, `time`, `latency`).
    Latency,
    /// Higher is better (`tflops`, `gb/s`, `bw`).
    Throughput,
    /// Part of the row key.
    Key,
}

impl ColumnKind {
    /// `latency` or `throughput`.
    pub fn as_str(self) -> &'static str {
        match self {
            ColumnKind::Latency => "latency",
            ColumnKind::Throughput => "throughput",
            ColumnKind::Key => "key",
        }
    }
}

/// Classifies a column header.
pub fn classify(header: &str) -> ColumnKind {
    let h = header.to_ascii_lowercase();
    let words: Vec<&str> = h
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '/'))
        .filter(|w| !w.is_empty())
        .collect();
    let has = |w: &str| words.contains(&w);
    if h.contains("tflops")
        || h.contains("gflops")
        || h.contains("gb/s")
        || h.contains("gbps")
        || has("bw")
        || h.contains("bandwidth")
        || h.contains("throughput")
    {
        ColumnKind::Throughput
    } else if has("us")
        || has("ms")
        || has("ns")
        || h.contains("time")
        || h.contains("latency")
        || h.ends_with("_us")
        || h.ends_with("_ms")
        || h.contains("(us)")
        || h.contains("(ms)")
    {
        ColumnKind::Latency
    } else {
        ColumnKind::Key
    }
}

/// One side's scraped cells: `(row key, column) → value`.
pub type Cells = BTreeMap<(String, String), f64>;

fn split_row(line: &str) -> Vec<String> {
    let t = line.trim();
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t.strip_suffix('|').unwrap_or(t);
    t.split('|').map(|c| c.trim().to_string()).collect()
}

fn is_separator(line: &str) -> bool {
    let cells = split_row(line);
    !cells.is_empty()
        && cells
            .iter()
            .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':' | ' ')))
}

fn number(s: &str) -> Option<f64> {
    let t = s
        .trim()
        .trim_end_matches(|c: char| c.is_alphabetic() || c == '/' || c == '%')
        .trim();
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Scrapes one run's output.
pub fn scrape(text: &str) -> Cells {
    let mut cells = Cells::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    let mut table_no = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim_start().starts_with('|') && i + 1 < lines.len() && is_separator(lines[i + 1]) {
            let header = split_row(line);
            let kinds: Vec<ColumnKind> = header.iter().map(|h| classify(h)).collect();
            table_no += 1;
            i += 2;
            while i < lines.len() && lines[i].trim_start().starts_with('|') {
                let row = split_row(lines[i]);
                let mut key_parts = vec![format!("t{table_no}")];
                for (j, k) in kinds.iter().enumerate() {
                    if *k == ColumnKind::Key {
                        key_parts.push(row.get(j).cloned().unwrap_or_default());
                    }
                }
                let key = key_parts.join("|");
                for (j, k) in kinds.iter().enumerate() {
                    if *k != ColumnKind::Key
                        && let Some(v) = row.get(j).and_then(|c| number(c))
                    {
                        cells.insert((key.clone(), header[j].clone()), v);
                    }
                }
                i += 1;
            }
            continue;
        }
        if let Some(rest) = line.trim().strip_prefix("[perf]")
            && let Some(pos) = rest.find("avg:")
        {
            let name = rest[..pos].trim().to_string();
            let after = rest[pos + 4..].trim();
            let mut parts = after.split_whitespace();
            if let (Some(v), unit) = (parts.next().and_then(number), parts.next().unwrap_or("us")) {
                let scale = match unit {
                    "ms" => 1000.0,
                    "ns" => 0.001,
                    "s" => 1e6,
                    _ => 1.0,
                };
                cells.insert((format!("perf|{name}"), "avg_us".to_string()), v * scale);
            }
        }
        i += 1;
    }
    cells
}

/// Keeps the best value per cell over repeats: min latency, max throughput.
pub fn best(runs: &[Cells]) -> Cells {
    let mut out = Cells::new();
    for run in runs {
        for (k, v) in run {
            let kind = classify(&k.1);
            out.entry(k.clone())
                .and_modify(|b| {
                    *b = match kind {
                        ColumnKind::Throughput => b.max(*v),
                        _ => b.min(*v),
                    }
                })
                .or_insert(*v);
        }
    }
    out
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A small deterministic generator (xorshift64*), so a report's interval is reproducible.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// 95 % percentile-bootstrap interval of the median of `ratios` (2000 resamples, fixed seed).
pub fn bootstrap_ci(ratios: &[f64]) -> (f64, f64) {
    if ratios.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let n = ratios.len();
    let mut meds = Vec::with_capacity(2000);
    let mut buf = vec![0.0; n];
    for _ in 0..2000 {
        for slot in buf.iter_mut() {
            *slot = ratios[(rng.next() % n as u64) as usize];
        }
        meds.push(median(&mut buf));
    }
    meds.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| meds[((p * (meds.len() - 1) as f64).round() as usize).min(meds.len() - 1)];
    (q(0.025), q(0.975))
}

/// The comparison of one column and its rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Compared {
    /// The column summary.
    pub column: PerfColumn,
    /// Rows, worst first.
    pub rows: Vec<PerfRow>,
}

/// Compares head with base, per column.
pub fn compare(base: &Cells, head: &Cells, min_rows: u32) -> Vec<Compared> {
    let mut by_col: BTreeMap<String, Vec<PerfRow>> = BTreeMap::new();
    for ((key, col), b) in base {
        let Some(h) = head.get(&(key.clone(), col.clone())) else {
            continue;
        };
        if *b <= 0.0 || *h <= 0.0 {
            continue;
        }
        let ratio = match classify(col) {
            ColumnKind::Throughput => h / b,
            _ => b / h,
        };
        by_col.entry(col.clone()).or_default().push(PerfRow {
            key: key.clone(),
            column: col.clone(),
            base: *b,
            head: *h,
            ratio,
        });
    }
    by_col
        .into_iter()
        .map(|(col, mut rows)| {
            let mut r: Vec<f64> = rows.iter().map(|x| x.ratio).collect();
            let med = median(&mut r);
            let (lo, hi) = bootstrap_ci(&r);
            rows.sort_by(|a, b| a.ratio.total_cmp(&b.ratio));
            Compared {
                column: PerfColumn {
                    kind: classify(&col).as_str().to_string(),
                    column: col,
                    rows: rows.len() as u64,
                    median_ratio: med,
                    ci_low: lo,
                    ci_high: hi,
                    eligible: rows.len() as u64 >= u64::from(min_rows),
                },
                rows,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "noise\n| M | N | time (us) | GB/s |\n|---|---|---:|---|\n| 1 | 8 | 10.0 | 100 |\n| 2 | 8 | 20.0 | 50 |\n[perf] softmax 4096 avg: 3.5 us\n";

    #[test]
    fn scrape_tables_and_perf_lines() {
        let c = scrape(OUT);
        assert_eq!(c.get(&("t1|1|8".into(), "time (us)".into())), Some(&10.0));
        assert_eq!(c.get(&("t1|2|8".into(), "GB/s".into())), Some(&50.0));
        assert_eq!(
            c.get(&("perf|softmax 4096".into(), "avg_us".into())),
            Some(&3.5)
        );
        assert_eq!(classify("M"), ColumnKind::Key);
        assert_eq!(classify("latency_ms"), ColumnKind::Latency);
        assert_eq!(classify("TFLOPS"), ColumnKind::Throughput);
    }

    #[test]
    fn best_and_ratio_directions() {
        let a = scrape(OUT);
        let slower = scrape(
            &OUT.replace("10.0", "20.0")
                .replace("20.0 | 50", "40.0 | 25"),
        );
        let b = best(&[a.clone(), slower.clone()]);
        assert_eq!(b.get(&("t1|1|8".into(), "time (us)".into())), Some(&10.0));
        let cmp = compare(&a, &slower, 2);
        let time = cmp.iter().find(|c| c.column.column == "time (us)").unwrap();
        assert!((time.column.median_ratio - 0.5).abs() < 1e-9, "{time:?}");
        assert!(time.column.eligible);
        let bw = cmp.iter().find(|c| c.column.column == "GB/s").unwrap();
        assert!(bw.column.median_ratio <= 1.0);
    }

    #[test]
    fn bootstrap_interval_brackets_the_median() {
        let r = [0.9, 1.0, 1.1, 0.95, 1.05, 1.0];
        let (lo, hi) = bootstrap_ci(&r);
        assert!(lo <= 1.0 && hi >= 1.0 && lo >= 0.9 && hi <= 1.1);
        let (lo, hi) = bootstrap_ci(&[0.5, 0.5, 0.5]);
        assert_eq!((lo, hi), (0.5, 0.5));
    }
}
