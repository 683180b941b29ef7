//! Bounded capture of a process's output.

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Bytes of each stream kept: the head and the tail, each half of this.
pub const LOG_LIMIT: usize = 64 * 1024;

/// A bounded capture: the first and the last `LOG_LIMIT/2` bytes, with the count dropped.
#[derive(Debug, Default)]
pub struct Bounded {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: u64,
}

impl Bounded {
    /// Appends `data`, dropping from the middle once the head is full.
    pub fn push(&mut self, data: &[u8]) {
        let half = LOG_LIMIT / 2;
        for &b in data {
            if self.head.len() < half {
                self.head.push(b);
            } else {
                if self.tail.len() == half {
                    self.tail.pop_front();
                    self.dropped += 1;
                }
                self.tail.push_back(b);
            }
        }
    }
    /// The captured text, with a marker where bytes were dropped.
    pub fn text(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            s.push_str(&format!("\n[... {} bytes dropped ...]\n", self.dropped));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        s.push_str(&String::from_utf8_lossy(&tail));
        s
    }
    /// Empties the capture.
    pub fn clear(&mut self) {
        self.head.clear();
        self.tail.clear();
        self.dropped = 0;
    }
}

/// The last `n` bytes of a string (on a char boundary).
pub fn tail(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s;
    }
    let mut i = s.len() - n;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

/// Reads `r` to its end on a thread of its own, into `buf`.
pub fn drain<R: Read + Send + 'static>(mut r: R, buf: Arc<Mutex<Bounded>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match r.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Ok(mut b) = buf.lock() {
                        b.push(&chunk[..n]);
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_keeps_head_and_tail() {
        let mut b = Bounded::default();
        let data = vec![b'a'; LOG_LIMIT];
        b.push(&data);
        b.push(&vec![b'z'; 1000]);
        let t = b.text();
        assert!(t.starts_with("aaa"));
        assert!(t.ends_with(&"z".repeat(1000)));
        assert!(t.contains("1000 bytes dropped"), "{}", &t[..100]);
    }

    #[test]
    fn tail_stays_on_a_char_boundary() {
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(tail("aé", 1), "");
        assert_eq!(tail("aéb", 2), "b");
    }
}
