//! Unit tests of the path and hash checks.

use super::files::{is_sha256, safe_relative};
use super::*;

#[test]
fn paths_must_stay_inside() {
    assert!(safe_relative("statements/baseline.json"));
    for p in ["", "/etc/passwd", "../x", "a/../../x", "a\\b", "./a"] {
        assert!(!safe_relative(p), "{p}");
    }
    assert!(is_sha256(PINNED_CORPUS_MANIFEST_SHA256));
    assert!(!is_sha256(&PINNED_CORPUS_MANIFEST_SHA256.to_uppercase()));
}
