//! kg-gpu: GPU discovery, idle picking, UUID-keyed locks and clock control.
//!
//! Not built yet: this crate is a placeholder in the workspace layout and exports nothing.
