//! `kg-heldout`: not built yet; it only answers `--help` and `--version`.

use clap::Parser;

/// Not built yet: no subcommands are available in this version.
#[derive(Parser)]
#[command(name = "kg-heldout", version)]
struct Cli {}

fn main() {
    let _ = Cli::parse();
}
