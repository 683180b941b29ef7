//! kg-heldout: held-out shape generation and original-versus-optimised evaluation.
//!
//! Not built yet: this crate is a placeholder in the workspace layout and exports nothing.
