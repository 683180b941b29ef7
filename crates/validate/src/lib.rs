//! kg-validate: the kernel pull-request validation pipeline.
//!
//! Not built yet: this crate is a placeholder in the workspace layout and exports nothing.
