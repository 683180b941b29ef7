//! Integration tests of kg-contract, one binary: round trips, bad inputs, shapes, nullable
//! trace tables, warnings, schemas and (ignored by default) compatibility with
//! SOL-ExecBench's examples.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

mod bad_input;
mod chain;
mod compat;
mod nullable;
mod roundtrip;
mod schemas;
mod shapes;
mod support;
mod v2;
mod warnings;
