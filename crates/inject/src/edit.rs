//! Byte-exact rewriting: only the replaced ranges change, every other byte stays, and the
//! result must parse. The three injection markers of AgentKernelArena's held-out YAML
//! (`TEST_SHAPES`, `def get_inputs`, `raw_replace`) are built on it.

use std::path::Path;

use crate::error::InjectError;
use crate::source::{LineIndex, PySource, Span};

/// Replace `span` with `replacement`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The bytes to replace.
    pub span: Span,
    /// The new text.
    pub replacement: String,
}

/// Applies non-overlapping edits to a file's text and checks that the result parses.
pub fn apply_edits(source: &PySource, edits: &[Edit]) -> Result<String, InjectError> {
    let text = source.text();
    let mut sorted: Vec<&Edit> = edits.iter().collect();
    sorted.sort_by_key(|e| (e.span.start, e.span.end));
    let bad = |reason: String| InjectError::BadEdit {
        path: source.path().to_path_buf(),
        reason,
    };
    let mut prev_end = 0usize;
    for e in &sorted {
        if e.span.start > e.span.end || e.span.end > text.len() {
            return Err(bad(format!(
                "edit {}..{} lies outside the file ({} bytes)",
                e.span.start,
                e.span.end,
                text.len()
            )));
        }
        if !text.is_char_boundary(e.span.start) || !text.is_char_boundary(e.span.end) {
            return Err(bad(format!(
                "edit {}..{} splits a UTF-8 character",
                e.span.start, e.span.end
            )));
        }
        if e.span.start < prev_end {
            return Err(bad(format!(
                "edit {}..{} overlaps the previous edit",
                e.span.start, e.span.end
            )));
        }
        prev_end = e.span.end;
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for e in &sorted {
        out.push_str(&text[at..e.span.start]);
        out.push_str(&e.replacement);
        at = e.span.end;
    }
    out.push_str(&text[at..]);
    check_parses(source.path(), &out)?;
    Ok(out)
}

/// Errors with the location in `text` if it is not valid Python.
pub fn check_parses(path: &Path, text: &str) -> Result<(), InjectError> {
    match ruff_python_parser::parse_module(text) {
        Ok(_) => Ok(()),
        Err(err) => {
            let (line, column) =
                LineIndex::new(text).line_col(text, err.location.start().to_usize());
            Err(InjectError::RewriteInvalid {
                path: path.to_path_buf(),
                line,
                column,
                message: err.error.to_string(),
            })
        }
    }
}

/// Re-indents replacement code for a slot that starts at a statement: the code is trimmed,
/// its first line goes where the old statement started, later non-blank lines get `indent`.
pub fn reindent(code: &str, indent: &str) -> String {
    let trimmed = code.trim();
    let mut out = String::with_capacity(trimmed.len() + 16);
    for (i, line) in trimmed.lines().enumerate() {
        if i > 0 {
            out.push('\n');
            if !line.trim().is_empty() {
                out.push_str(indent);
            }
        }
        out.push_str(line);
    }
    out
}

/// AKA's `TEST_SHAPES` marker: replaces the `TEST_SHAPES = ...` statement with
/// `replacement_code` (which contains `TEST_SHAPES = [...]`).
pub fn replace_test_shapes(
    source: &PySource,
    replacement_code: &str,
) -> Result<String, InjectError> {
    let list = source
        .test_shapes()
        .ok_or_else(|| InjectError::MarkerNotFound {
            path: source.path().to_path_buf(),
            what: "a `TEST_SHAPES = ...` assignment".into(),
        })?;
    let indent = source.indent_at(list.stmt.start).to_string();
    finish(
        source,
        Edit {
            span: list.stmt,
            replacement: reindent(replacement_code, &indent),
        },
    )
}

/// AKA's `def get_inputs` marker: replaces the whole `get_inputs` function.
pub fn replace_get_inputs(
    source: &PySource,
    replacement_code: &str,
) -> Result<String, InjectError> {
    let f = source
        .get_inputs()
        .ok_or_else(|| InjectError::MarkerNotFound {
            path: source.path().to_path_buf(),
            what: "a `def get_inputs(` function".into(),
        })?;
    finish(
        source,
        Edit {
            span: f.def,
            replacement: reindent(replacement_code, &f.indent),
        },
    )
}

/// AKA's `raw_replace` marker: replaces the first exact occurrence of `old_code`. The result
/// must parse when `path` ends in `.py`.
pub fn raw_replace(
    path: &Path,
    text: &str,
    old_code: &str,
    replacement_code: &str,
) -> Result<String, InjectError> {
    let Some(at) = (!old_code.is_empty())
        .then(|| text.find(old_code))
        .flatten()
    else {
        let head: String = old_code.chars().take(80).collect();
        return Err(InjectError::MarkerNotFound {
            path: path.to_path_buf(),
            what: format!("the exact `old_code` text (starting {head:?})"),
        });
    };
    let mut out = String::with_capacity(text.len() + replacement_code.len());
    out.push_str(&text[..at]);
    out.push_str(replacement_code);
    out.push_str(&text[at + old_code.len()..]);
    if out == text {
        return Err(InjectError::NoChange {
            path: path.to_path_buf(),
        });
    }
    if path.extension().is_some_and(|e| e == "py") {
        check_parses(path, &out)?;
    }
    Ok(out)
}

fn finish(source: &PySource, edit: Edit) -> Result<String, InjectError> {
    let out = apply_edits(source, &[edit])?;
    if out == source.text() {
        return Err(InjectError::NoChange {
            path: source.path().to_path_buf(),
        });
    }
    Ok(out)
}
