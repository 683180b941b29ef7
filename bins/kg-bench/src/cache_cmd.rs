//! `kg-bench cache ls|clean`: the build cache of compiled solutions (`kg_exec::build`).

use std::time::{Duration, SystemTime};

use anyhow::anyhow;
use clap::{Args, Subcommand};
use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use kg_exec::build::{self, BuildCache, Listed};

pub const EXIT_CACHE: &str = "Exit codes:
  0    listed / cleaned
  2    the cache directory cannot be read or an entry cannot be removed

The cache is `$KG_CACHE_DIR/builds-v1` (default `~/.cache/kernelgate/builds-v1`), bounded by
KG_CACHE_MAX_BYTES (default 20 GiB; least recently used entries go first).";

/// `kg-bench cache`.
#[derive(Subcommand)]
pub enum CacheCommand {
    /// List the cached builds: key, solution, module size, build time, last use.
    Ls(LsArgs),
    /// Remove cached builds (all, or those unused for --older-than DAYS).
    Clean(CleanArgs),
}

/// `kg-bench cache ls`.
#[derive(Args)]
pub struct LsArgs {
    /// Print the entries as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// `kg-bench cache clean`.
#[derive(Args)]
pub struct CleanArgs {
    /// Only entries not used for this many days.
    #[arg(long, value_name = "DAYS")]
    older_than: Option<f64>,
}

fn cache() -> BuildCache {
    BuildCache::new(&kg_exec::engine::default_cache_dir())
}

fn age_days(l: &Listed) -> Option<f64> {
    let used = l.last_used?;
    let age = SystemTime::now()
        .duration_since(used)
        .unwrap_or(Duration::ZERO);
    Some(age.as_secs_f64() / 86_400.0)
}

/// Runs `kg-bench cache ...`.
pub fn run(c: CacheCommand) -> anyhow::Result<i32> {
    let cache = cache();
    match c {
        CacheCommand::Ls(a) => {
            let listed = cache.list()?;
            let total: u64 = listed.iter().map(|l| l.bytes).sum();
            if a.json {
                let rows: Vec<serde_json::Value> = listed
                    .iter()
                    .map(|l| {
                        serde_json::json!({
                            "dir": l.dir,
                            "bytes": l.bytes,
                            "last_used_days": age_days(l),
                            "entry": l.entry.as_ref().ok(),
                            "error": l.entry.as_ref().err(),
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "cache": cache.root(),
                        "bytes": total,
                        "max_bytes": build::max_bytes(),
                        "entries": rows,
                    }))?
                );
                return Ok(0);
            }
            let mut t = Table::new();
            t.load_style(UTF8_FULL_CONDENSED);
            t.set_header(vec![
                "key",
                "solution",
                "module",
                "built in",
                "created",
                "last used",
            ]);
            for l in &listed {
                let used = age_days(l).map_or_else(|| "?".into(), |d| format!("{d:.1} days ago"));
                match &l.entry {
                    Ok(e) => t.add_row(vec![
                        e.key.chars().take(16).collect::<String>(),
                        e.solution.clone(),
                        format!("{:.1} MiB", e.module_bytes as f64 / (1 << 20) as f64),
                        format!("{:.1} s", e.build_s),
                        e.created_utc.clone(),
                        used,
                    ]),
                    Err(why) => t.add_row(vec![
                        l.dir
                            .file_name()
                            .map(|n| n.to_string_lossy().chars().take(16).collect())
                            .unwrap_or_default(),
                        format!("(unreadable: {why})"),
                        String::new(),
                        String::new(),
                        String::new(),
                        used,
                    ]),
                };
            }
            println!("{t}");
            println!(
                "{} entr{} in `{}`, {:.1} MiB of {:.1} MiB (KG_CACHE_MAX_BYTES)",
                listed.len(),
                if listed.len() == 1 { "y" } else { "ies" },
                cache.root().display(),
                total as f64 / (1 << 20) as f64,
                build::max_bytes() as f64 / (1 << 20) as f64
            );
            Ok(0)
        }
        CacheCommand::Clean(a) => {
            if let Some(d) = a.older_than
                && !(d.is_finite() && d >= 0.0)
            {
                return Err(anyhow!(
                    "--older-than must be a number of days >= 0, got {d}"
                ));
            }
            let removed = cache.clean(|l| match a.older_than {
                None => true,
                Some(days) => age_days(l).is_none_or(|age| age > days),
            })?;
            for d in &removed {
                eprintln!("removed `{}`", d.display());
            }
            println!(
                "{} entr{} removed from `{}`",
                removed.len(),
                if removed.len() == 1 { "y" } else { "ies" },
                cache.root().display()
            );
            Ok(0)
        }
    }
}
