//! kg-exec: process isolation, the Python judge and candidate workers, timing.
//!
//! Not built yet: this crate is a placeholder in the workspace layout and exports nothing.
