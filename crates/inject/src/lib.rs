//! kg-inject: Python source analysis and byte-exact rewriting of shape literals.
//!
//! Not built yet: this crate is a placeholder in the workspace layout and exports nothing.
