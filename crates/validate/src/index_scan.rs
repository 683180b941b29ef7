//! `index_width_scan` (info only): in the lines a change adds to kernel sources, count
//! `index * stride` products on lines that do not widen to 64 bits (`int64`, `.to(tl.int64)`,
//! `long`, `size_t`). 32-bit index arithmetic wraps at large M; this points a reviewer at it.

/// Counts unwidened index × stride products in one line.
pub fn products_in_line(line: &str) -> u64 {
    let l = line.trim();
    if l.starts_with('#') || l.starts_with("//") {
        return 0;
    }
    let lower = l.to_ascii_lowercase();
    if lower.contains("int64") || lower.contains("long") || lower.contains("size_t") {
        return 0;
    }
    let bytes: Vec<char> = l.chars().collect();
    let ident_at = |mut i: isize, dir: isize| -> String {
        // Skip spaces and an opening/closing bracket, then read an identifier.
        while i >= 0 && (i as usize) < bytes.len() && matches!(bytes[i as usize], ' ' | '(' | ')') {
            i += dir;
        }
        let mut s = String::new();
        while i >= 0
            && (i as usize) < bytes.len()
            && (bytes[i as usize].is_alphanumeric() || matches!(bytes[i as usize], '_' | '.'))
        {
            s.push(bytes[i as usize]);
            i += dir;
        }
        if dir < 0 {
            s.chars().rev().collect()
        } else {
            s
        }
    };
    let mut n = 0;
    for (i, c) in bytes.iter().enumerate() {
        if *c != '*' {
            continue;
        }
        let prev_star = i > 0 && bytes[i - 1] == '*';
        let next_star = i + 1 < bytes.len() && bytes[i + 1] == '*';
        if prev_star || next_star {
            continue;
        }
        let left = ident_at(i as isize - 1, -1).to_ascii_lowercase();
        let right = ident_at(i as isize + 1, 1).to_ascii_lowercase();
        if (left.contains("stride") && !right.is_empty())
            || (right.contains("stride") && !left.is_empty())
        {
            n += 1;
        }
    }
    n
}

/// Whether a file is kernel source worth scanning.
pub fn is_kernel_source(path: &str) -> bool {
    let ext = path.rsplit('.').next().unwrap_or("");
    matches!(
        ext,
        "py" | "cu" | "cuh" | "hip" | "cpp" | "cc" | "h" | "hpp"
    ) && !crate::policy::is_test_path(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_unwidened_products_only() {
        assert_eq!(products_in_line("ptr = x_ptr + row * stride_xm + cols"), 1);
        assert_eq!(
            products_in_line("ptr = x_ptr + row.to(tl.int64) * stride_xm"),
            0
        );
        assert_eq!(products_in_line("# row * stride"), 0);
        assert_eq!(
            products_in_line("a = pid_m * stride_am + pid_n * stride_an"),
            2
        );
        assert_eq!(products_in_line("y = x ** 2 * 3"), 0);
    }
}
