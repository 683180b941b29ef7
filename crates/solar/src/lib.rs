//! kg-solar: speed-of-light bounds from a definition's PyTorch reference.
//!
//! Not built yet: this crate is a placeholder in the workspace layout and exports nothing.
