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
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let name = e.file_name();
        if skip_build && name == "build" {
            continue;
        }
        let src = e.path();
        let dst = to.join(&name);
        let ft = e.file_type()?;
        if ft.is_symlink() {
            let target = std::fs::read_link(&src)?;
            std::os::unix::fs::symlink(target, &dst)?;
        } else if ft.is_dir() {
            copy_tree(&src, &dst, false)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}
