//! kg-inject: Python source analysis and byte-exact rewriting of the shapes a kernel task tests.
//!
//! Everything starts from a [`PySource`], a file parsed with `ruff_python_parser` (pinned at
//! `=0.0.10`; ruff's crates have no API stability promise, so only this crate touches them and
//! its public types are its own: [`Span`], [`Location`], [`PyValue`]). An unparseable file is
//! an [`InjectError::Parse`] naming `file:line:column`.
//!
//! Finding (each result carries a [`Location`]):
//! - shape lists: [`PySource::test_shapes`] (`TEST_SHAPES = [...]`, vllm task runners),
//!   [`PySource::parametrizes`] (`@pytest.mark.parametrize`, rocmbench tests),
//!   [`PySource::get_inputs`] (gpumode `get_inputs()` and its `configs = [...]` list), and
//!   [`PySource::commented_rows`] (commented-out rows inside a list);
//! - shape channels: [`PySource::env_reads`] and [`PySource::arg_defaults`];
//! - [`PySource::tolerances`]: `atol=`/`rtol=`, `*TOL*` names, dtype → tolerance dicts;
//! - [`PySource::constraints`] (what `assert`s require of a name), [`PySource::row_names`]
//!   and [`PySource::init_kwargs`], which the held-out shape generator honours.
//!
//! Rewriting: [`apply_edits`] replaces byte ranges and nothing else, then re-parses the result;
//! [`replace_test_shapes`], [`replace_get_inputs`] and [`raw_replace`] are AgentKernelArena's
//! three injection markers built on it.
//!
//! Not for: running Python, deciding which shapes to test (that is kg-heldout), or formatting
//! code: replacement text is inserted as given (re-indented only).

pub mod edit;
pub mod error;
pub mod find;
pub mod literal;
pub mod source;

pub use edit::{
    Edit, apply_edits, check_parses, raw_replace, reindent, replace_get_inputs, replace_test_shapes,
};
pub use error::InjectError;
pub use find::{
    ArgDefault, CommentedRow, Constraint, ConstraintKind, EnvForm, EnvRead, GetInputs, Parametrize,
    Row, ShapeList, ToleranceKind, ToleranceLiteral,
};
pub use literal::PyValue;
pub use source::{Location, PySource, Span};
