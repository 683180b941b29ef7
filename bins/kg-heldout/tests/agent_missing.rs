//! An agent backend whose CLI is not installed fails with a message naming the CLI, writes no
//! held-out file and launches nothing. The binary runs with `PATH` set to an empty directory,
//! so a CLI installed on the test machine cannot be found.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kg_test_support::workspace;
use std::process::Command;

#[test]
fn agent_backend_without_its_cli_fails_naming_the_cli() {
    let tasks = workspace().join("fixtures/heldout/tasks");
    for (backend, program) in [
        ("claude_code", "claude"),
        ("codex", "codex"),
        ("cursor", "cursor-agent"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let empty_path = tmp.path().join("bin");
        std::fs::create_dir(&empty_path).unwrap();
        let out_dir = tmp.path().join("held_out_tests");
        let out = Command::new(env!("CARGO_BIN_EXE_kg-heldout"))
            .args(["generate", "--tasks-dir"])
            .arg(&tasks)
            .arg("--output-dir")
            .arg(&out_dir)
            .args([
                "--backend",
                backend,
                "--tasks",
                "torch2hip/gpumode/KgRmsNorm",
                "--timeout",
                "5",
            ])
            .env_clear()
            .env("PATH", &empty_path)
            .env("KG_LOG", "warn")
            .current_dir(tmp.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{backend}: {stdout}\n{stderr}");
        let line = stdout
            .lines()
            .find(|l| l.starts_with("failed") && l.contains("torch2hip/gpumode/KgRmsNorm"))
            .unwrap_or_else(|| panic!("{backend}: no failure line: {stdout}\n{stderr}"));
        assert!(
            line.contains(&format!("`{program}` CLI")) && line.contains("not installed"),
            "{backend}: {line}"
        );
        assert!(line.contains(&format!("`{backend}` backend")), "{line}");
        assert!(
            line.contains("--backend rules"),
            "the hint is missing: {line}"
        );
        assert!(stderr.contains("0 written, 1 failed"), "{stderr}");
        // Nothing was generated, no agent log was kept.
        let task_out = out_dir.join("torch2hip/gpumode/KgRmsNorm");
        assert!(!task_out.join("held_out_shapes.yaml").exists());
        assert!(!task_out.join("agent_log.txt").exists());
    }
}
