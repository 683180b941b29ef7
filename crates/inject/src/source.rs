//! A parsed Python file: its text, its syntax tree and byte-offset to line/column mapping.

use std::fmt;
use std::path::{Path, PathBuf};

use ruff_python_ast::ModModule;
use ruff_python_parser::{Parsed, parse_module};
use ruff_text_size::{Ranged, TextRange};

use crate::error::InjectError;

/// A half-open byte range `[start, end)` in a file's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl Span {
    /// Builds a span.
    pub fn new(start: usize, end: usize) -> Self {
        Self { start, end }
    }

    /// Whether `other` lies inside this span.
    pub fn contains(&self, other: Span) -> bool {
        self.start <= other.start && other.end <= self.end
    }

    pub(crate) fn of(r: TextRange) -> Self {
        Self {
            start: r.start().to_usize(),
            end: r.end().to_usize(),
        }
    }
}

/// A place in a file: 1-based line and 1-based column (in characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub path: PathBuf,
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.path.display(), self.line, self.column)
    }
}

/// Byte offsets of line starts, for offset → line/column.
#[derive(Debug, Clone)]
pub(crate) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> Self {
        let mut starts = vec![0];
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                starts.push(i + 1);
            }
        }
        Self { starts }
    }

    /// 1-based (line, column in characters).
    pub(crate) fn line_col(&self, text: &str, offset: usize) -> (usize, usize) {
        let offset = offset.min(text.len());
        let line = match self.starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.starts[line];
        let col = text
            .get(start..offset)
            .map(|s| s.chars().count())
            .unwrap_or(offset - start);
        (line + 1, col + 1)
    }

    pub(crate) fn line_start(&self, text: &str, offset: usize) -> usize {
        let offset = offset.min(text.len());
        match self.starts.binary_search(&offset) {
            Ok(i) => self.starts[i],
            Err(i) => self.starts[i - 1],
        }
    }
}

/// A Python file parsed with `ruff_python_parser`; all analyses and rewrites start here.
pub struct PySource {
    path: PathBuf,
    text: String,
    parsed: Parsed<ModModule>,
    lines: LineIndex,
}

impl fmt::Debug for PySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PySource")
            .field("path", &self.path)
            .field("bytes", &self.text.len())
            .finish()
    }
}

impl PySource {
    /// Parses `text`; `path` is used in locations and errors only.
    pub fn parse(path: impl Into<PathBuf>, text: impl Into<String>) -> Result<Self, InjectError> {
        let path = path.into();
        let text = text.into();
        let lines = LineIndex::new(&text);
        match parse_module(&text) {
            Ok(parsed) => Ok(Self {
                path,
                text,
                parsed,
                lines,
            }),
            Err(err) => {
                let (line, column) = lines.line_col(&text, err.location.start().to_usize());
                Err(InjectError::Parse {
                    at: Location { path, line, column },
                    message: err.error.to_string(),
                })
            }
        }
    }

    /// Reads and parses a file.
    pub fn read(path: &Path) -> Result<Self, InjectError> {
        let text = std::fs::read_to_string(path).map_err(|source| InjectError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, text)
    }

    /// The file's path as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The full text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text of a span (empty if the span is invalid).
    pub fn slice(&self, span: Span) -> &str {
        self.text.get(span.start..span.end).unwrap_or("")
    }

    /// The location of a byte offset.
    pub fn location(&self, offset: usize) -> Location {
        let (line, column) = self.lines.line_col(&self.text, offset);
        Location {
            path: self.path.clone(),
            line,
            column,
        }
    }

    /// The leading whitespace of the line holding `offset`.
    pub fn indent_at(&self, offset: usize) -> &str {
        let start = self.lines.line_start(&self.text, offset);
        let line = &self.text[start..];
        let n = line.len() - line.trim_start_matches([' ', '\t']).len();
        &line[..n]
    }

    pub(crate) fn module(&self) -> &ModModule {
        self.parsed.syntax()
    }

    pub(crate) fn comments_in(&self, span: Span) -> Vec<Span> {
        self.parsed
            .tokens()
            .iter()
            .filter(|t| t.kind() == ruff_python_ast::token::TokenKind::Comment)
            .map(|t| Span::of(t.range()))
            .filter(|s| span.contains(*s))
            .collect()
    }

    /// Byte offset where the line before the one holding `offset` starts, if any.
    pub(crate) fn previous_line(&self, offset: usize) -> Option<Span> {
        let start = self.lines.line_start(&self.text, offset);
        if start == 0 {
            return None;
        }
        let prev_start = self.lines.line_start(&self.text, start - 1);
        Some(Span::new(prev_start, start - 1))
    }
}
