//! Choosing what a run evaluates: `--filter` terms over problems, solutions and workloads, and
//! workload selection.

use super::*;

/// A definition name that several problem directories define.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateName {
    /// The definition name.
    pub name: String,
    /// The directories defining it, in corpus order.
    pub dirs: Vec<PathBuf>,
    /// Whether every one of their definitions is the same (axes, tensors, reference).
    pub identical: bool,
}

/// What a `--filter` term looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FilterField {
    /// The problem key, the definition name or the solution name.
    Any,
    Problem,
    Definition,
    Solution,
    Language,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FilterTerm {
    negate: bool,
    field: FilterField,
    pattern: String,
}

/// One `--filter` expression: terms joined by `&`, all of which must match. A term is
/// `[!][FIELD:]PATTERN`; FIELD is `problem` (the problem key), `definition`, `solution` or
/// `language`; without a field the pattern may match the problem key, the definition name or
/// the solution name. A pattern with `*` or `?` is a glob over the whole value; without, a
/// substring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    expr: String,
    terms: Vec<FilterTerm>,
}

/// What a filter is matched against: one (problem, solution) pair.
#[derive(Debug, Clone, Copy)]
pub struct PairRef<'a> {
    /// The problem key ([`problem_key`]).
    pub key: &'a str,
    /// The definition name.
    pub definition: &'a str,
    /// The solution.
    pub solution: &'a Solution,
}

impl std::str::FromStr for Filter {
    type Err = CorpusError;
    fn from_str(expr: &str) -> Result<Filter, CorpusError> {
        let err = |why: String| CorpusError::Filter {
            expr: expr.to_string(),
            why,
        };
        let mut terms = Vec::new();
        for raw in expr.split('&') {
            let mut t = raw.trim();
            let negate = t.starts_with('!');
            if negate {
                t = t[1..].trim_start();
            }
            let (field, pattern) = match t.split_once(':') {
                Some((f, p)) => {
                    let field = match f.trim() {
                        "problem" => FilterField::Problem,
                        "definition" => FilterField::Definition,
                        "solution" => FilterField::Solution,
                        "language" => FilterField::Language,
                        other => {
                            return Err(err(format!(
                                "unknown field `{other}` (use problem, definition, solution or language)"
                            )));
                        }
                    };
                    (field, p.trim())
                }
                None => (FilterField::Any, t),
            };
            if pattern.is_empty() {
                return Err(err(format!("empty pattern in term `{}`", raw.trim())));
            }
            terms.push(FilterTerm {
                negate,
                field,
                pattern: pattern.to_string(),
            });
        }
        Ok(Filter {
            expr: expr.to_string(),
            terms,
        })
    }
}

impl Filter {
    /// The expression as given.
    pub fn as_str(&self) -> &str {
        &self.expr
    }

    /// Whether every term matches `pair`.
    pub fn matches(&self, pair: &PairRef<'_>) -> bool {
        self.terms.iter().all(|t| {
            let hit = |v: &str| pattern_matches(&t.pattern, v);
            let m = match t.field {
                FilterField::Any => {
                    hit(pair.key) || hit(pair.definition) || hit(&pair.solution.name)
                }
                FilterField::Problem => hit(pair.key),
                FilterField::Definition => hit(pair.definition),
                FilterField::Solution => hit(&pair.solution.name),
                FilterField::Language => pair.solution.spec.languages.iter().any(|l| hit(l)),
            };
            m != t.negate
        })
    }
}

/// Whether any of `filters` matches `pair` (no filters: every pair).
pub fn selected(filters: &[Filter], pair: &PairRef<'_>) -> bool {
    filters.is_empty() || filters.iter().any(|f| f.matches(pair))
}

/// A glob (`*`, `?`) over the whole of `value`, or, without wildcards, a substring of it.
pub(crate) fn pattern_matches(pattern: &str, value: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return value.contains(pattern);
    }
    let p: Vec<char> = pattern.chars().collect();
    let v: Vec<char> = value.chars().collect();
    // Iterative glob with backtracking to the last `*`.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < v.len() {
        if i < p.len() && (p[i] == '?' || p[i] == v[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

/// The workloads to evaluate: all, or those named, capped at `max`.
pub fn select_workloads<'a>(
    problem: &'a Problem,
    uuids: Option<&[String]>,
    max: Option<usize>,
) -> Vec<&'a LoadedWorkload> {
    let mut v: Vec<&LoadedWorkload> = problem
        .workloads
        .iter()
        .filter(|w| uuids.is_none_or(|u| u.contains(&w.workload.uuid)))
        .collect();
    if let Some(m) = max {
        v.truncate(m);
    }
    v
}
