//! Text and numbers as the page writes them: escaping, significant digits, SI prefixes.

/// Escapes text for HTML element content and double-quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A number with about four significant digits, plain where that reads well.
pub fn sig(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-4..1e6).contains(&a) {
        format!("{x:.3e}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.3}")
    } else {
        let digits = (3.0 - a.log10().floor()) as usize;
        format!("{x:.digits$}")
    }
}

/// A rate with an SI prefix: `12.3 GFLOP/s`.
pub fn si(x: f64, unit: &str) -> String {
    const P: [(f64, &str); 6] = [
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1.0, ""),
    ];
    for (f, p) in P {
        if x.abs() >= f {
            return format!("{} {p}{unit}", sig(x / f));
        }
    }
    format!("{} {unit}", sig(x))
}

pub(super) fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), sig)
}

/// Attribute value for a number: full precision (the test compares it with the traces).
pub(super) fn num_attr(x: Option<f64>) -> String {
    x.map_or_else(String::new, |v| format!("{v:e}"))
}
