//! The files of a task's sides: the original kernel restored into `orig/`, and tree copies.

use std::path::Path;

use crate::task::TaskConfig;

/// AKA's per-type rule: hip2hip copies `target_file_path`; torch2hip removes the agent's HIP
/// file; other types copy every `source_file_path` from the tasks directory.
pub(super) fn restore_original(
    orig: &Path,
    task_dir: &Path,
    cfg: &TaskConfig,
) -> Result<(), String> {
    let files: Vec<String> = match cfg.task_type.as_str() {
        "torch2hip" => {
            if let Some(t) = &cfg.target_file_path {
                let p = orig.join(t);
                if p.exists() {
                    std::fs::remove_file(&p)
                        .map_err(|e| format!("cannot remove {}: {e}", p.display()))?;
                }
            }
            return Ok(());
        }
        "hip2hip" => vec![
            cfg.target_file_path
                .clone()
                .ok_or("config.yaml has no target_file_path for a hip2hip task")?,
        ],
        _ => {
            if cfg.source_file_path.is_empty() {
                return Err(format!(
                    "config.yaml has no source_file_path for a {} task",
                    cfg.task_type
                ));
            }
            cfg.source_file_path.clone()
        }
    };
    for rel in files {
        let src = task_dir.join(&rel);
        let dst = orig.join(&rel);
        if !src.is_file() {
            return Err(format!("original kernel `{}` not found", src.display()));
        }
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::copy(&src, &dst).map_err(|e| format!("cannot restore {}: {e}", src.display()))?;
    }
    Ok(())
}

/// Copies a directory tree; symlinks are recreated as symlinks. With `skip_build`, the
/// top-level `build/` (stale reports) is left out.
pub fn copy_tree(from: &Path, to: &Path, skip_build: bool) -> std::io::Result<()> {
    let skip: &[&str] = if skip_build { &["build"] } else { &[] };
    kg_contract::tree::copy_tree(
        from,
        to,
        kg_contract::tree::CopyOptions {
            skip_top: skip,
            keep_symlinks: true,
        },
    )
    .map(|_| ())
}
