use super::*;

#[test]
fn task_ids_follow_aka() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("hip2hip_gpumode_SiLU_20260417_142639");
    std::fs::create_dir_all(&a).unwrap();
    assert_eq!(resolve_task_id(&a).unwrap(), "hip2hip/gpumode/SiLU");
    let b = d
        .path()
        .join("triton2triton_rocmbench_easy_test_add_kernel_20260417_142639");
    std::fs::create_dir_all(&b).unwrap();
    assert_eq!(
        resolve_task_id(&b).unwrap(),
        "triton2triton/rocmbench/easy/test_add_kernel"
    );
    std::fs::write(b.join("task_result.yaml"), "task_name: x/y/z\n").unwrap();
    assert_eq!(resolve_task_id(&b).unwrap(), "x/y/z");
}

#[test]
fn output_suffix_is_checked() {
    let p = Path::new("/w/run_1");
    assert_eq!(
        output_dir_for(p, "_heldout").unwrap(),
        PathBuf::from("/w/run_1_heldout")
    );
    assert!(output_dir_for(p, "").is_err());
    assert!(output_dir_for(p, "/../x").is_err());
}
