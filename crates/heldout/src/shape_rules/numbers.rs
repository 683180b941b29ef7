//! Small arithmetic for the rules: a seeded generator, primes, medians, gcd and lcm.

/// A tiny deterministic generator (splitmix64).
pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(super) fn pick(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

pub(super) fn is_prime(n: i64) -> bool {
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

/// The largest prime at or below `n` (3 at least).
pub(super) fn prime_at_or_below(n: i64) -> i64 {
    let mut k = n.max(3);
    while k > 3 && !is_prime(k) {
        k -= 1;
    }
    k
}

/// The smallest prime above `n`.
pub(super) fn prime_above(n: i64) -> i64 {
    let mut k = n.max(2) + 1;
    while !is_prime(k) {
        k += 1;
    }
    k
}

/// The upper median.
pub(super) fn median(v: &[i64]) -> i64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    s[s.len() / 2]
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a.abs() } else { gcd(b, a % b) }
}

pub(super) fn lcm(a: i64, b: i64) -> i64 {
    (a / gcd(a, b)).saturating_mul(b)
}
