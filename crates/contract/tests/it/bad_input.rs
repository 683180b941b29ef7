//! Bad inputs: every error names the file, the line (JSONL, or the JSON line of a syntax or
//! type error) and the field, and says what was expected.

use kg_contract::{ContractError, Problem, load_definition, load_solution, load_traces};

use crate::support::{assert_located, fixture, line_of};

/// Loads `bad/workloads/<case>.jsonl` against a good definition and returns the error.
fn workload_err(definition: &str, case: &str) -> (ContractError, std::path::PathBuf) {
    let wl = fixture(&format!("bad/workloads/{case}.jsonl"));
    let def = fixture(&format!("good/{definition}/definition.json"));
    let err = Problem::from_files(&def, &wl).expect_err(case);
    (err, wl)
}

#[test]
fn workload_errors_name_file_line_and_field() {
    // (case, line, field, fragment of the message)
    let cases: &[(&str, usize, &str, &str)] = &[
        (
            "unknown_axis",
            3,
            "axes.seqlen",
            "axis `seqlen` is not declared by the definition (declared: batch, hidden, double)",
        ),
        (
            "missing_input",
            2,
            "inputs.eps",
            "missing; the definition declares input `eps`, expected e.g. `\"eps\": {\"type\": \"scalar\", \"value\": <number>}`",
        ),
        ("truncated_line_4", 4, "", "EOF while parsing an object"),
        (
            "contradictory_const",
            2,
            "axes.hidden",
            "axis `hidden` is `const` = 8 in the definition, but the workload gives 16",
        ),
        (
            "contradictory_expr",
            2,
            "axes.double",
            "axis `double` is `expr` = 16 in the definition, but the workload gives 15",
        ),
        ("unbound_var", 1, "axes.batch", "add `\"batch\": <size>`"),
        (
            "duplicate_uuid",
            3,
            "uuid",
            "`ok-1` repeats the uuid of line 1",
        ),
        (
            "scalar_for_tensor",
            2,
            "inputs.x.type",
            "is `scalar`, but `x` is a tensor",
        ),
        (
            "random_for_scalar",
            2,
            "inputs.eps.type",
            "is `random`, but `eps` is a Python scalar",
        ),
        (
            "unknown_input",
            2,
            "inputs.residual",
            "not an input of definition `kg_fixture_small` (inputs: x, eps)",
        ),
        (
            "custom_without_entrypoint",
            2,
            "inputs.x.type",
            "no `custom_inputs_entrypoint`",
        ),
        (
            "unknown_input_type",
            2,
            "inputs.x.type",
            "unknown variant `rand`, expected one of `random`, `scalar`, `safetensors`, `custom`",
        ),
        (
            "scalar_value_string",
            2,
            "inputs.eps",
            "expected an int, a float or a bool",
        ),
        (
            "negative_axis",
            2,
            "axes.batch",
            "axis `batch` = -3 is negative; sizes must be >= 0",
        ),
        (
            "ratio_above_one",
            2,
            "tolerance.required_matched_ratio",
            "is 1.5; expected a fraction in [0, 1]",
        ),
        (
            "tolerance_wrong_type",
            2,
            "tolerance.max_atol",
            "invalid type: string \"1e-2\", expected f64",
        ),
        // Numeric fields are checked against their ranges at load.
        (
            "atol_huge",
            2,
            "tolerance.max_atol",
            "is 1e300; expected a finite number in [0, 1e6]",
        ),
        (
            "atol_out_of_range",
            2,
            "tolerance.max_atol",
            "number out of range",
        ),
        (
            "rtol_negative",
            2,
            "tolerance.max_rtol",
            "is -1e-2; expected a finite number in [0, 1e6]",
        ),
        (
            "error_cap_huge",
            2,
            "tolerance.max_error_cap",
            "is 1e7; expected a finite number in [0, 1e6]",
        ),
        (
            "ratio_negative",
            2,
            "tolerance.required_matched_ratio",
            "is -0.5; expected a fraction in [0, 1]",
        ),
        (
            "scalar_beyond_dtype",
            2,
            "inputs.eps.value",
            "beyond the largest finite float32",
        ),
        (
            "elements_overflow",
            2,
            "inputs.x.shape",
            "does not fit in 64 bits",
        ),
    ];
    for &(case, line, field, fragment) in cases {
        let (err, wl) = workload_err("small", case);
        assert_located(&err, &wl, Some(line), field, fragment);
    }
}

#[test]
fn custom_inputs_cannot_mix_with_other_types() {
    let (err, wl) = workload_err("custom_inputs", "custom_mixed");
    assert_located(
        &err,
        &wl,
        Some(1),
        "inputs.top_k.type",
        "mixes `custom` inputs (probs) with other types (top_k)",
    );
}

#[test]
fn empty_workload_file_is_an_error() {
    let (err, wl) = workload_err("small", "empty");
    assert_located(&err, &wl, None, "", "holds no workloads");
}

#[test]
fn definition_errors_name_file_line_and_field() {
    // (case, marker whose line the error must name (None: no line), field, fragment)
    let cases: &[(&str, Option<&str>, &str, &str)] = &[
        (
            "malformed",
            Some("\"hidden\": { \"type\": \"const\""),
            "axes",
            "expected `,` or `}`",
        ),
        (
            "wrong_dtype",
            Some("\"bf16\""),
            "inputs.x.dtype",
            "unknown variant `bf16`, expected one of `float64`, `float32`",
        ),
        (
            "unknown_axis_type",
            Some("\"variable\""),
            "axes.width.type",
            "unknown variant `variable`, expected one of `const`, `var`, `expr`",
        ),
        (
            "undeclared_axis_in_shape",
            None,
            "outputs.y.shape",
            "axis `width` is not declared in `axes` (declared: batch, hidden)",
        ),
        (
            "empty_reference_no_sibling",
            None,
            "reference",
            "reference.py",
        ),
        (
            "reference_without_run",
            None,
            "reference",
            "does not define `run`",
        ),
        (
            "no_outputs",
            None,
            "outputs",
            "expected at least one output",
        ),
        (
            "input_named_like_output",
            None,
            "outputs.x",
            "same name as an input",
        ),
        (
            "input_named_like_axis",
            None,
            "inputs.scale",
            "same name as an axis",
        ),
        (
            "custom_entrypoint_undefined",
            None,
            "custom_inputs_entrypoint",
            "names `make_inputs`, which the reference does not define",
        ),
        (
            "bad_expression",
            None,
            "axes.width.expression",
            "`hidden * * 2`: syntax error",
        ),
    ];
    for &(case, marker, field, fragment) in cases {
        let path = fixture(&format!("bad/definitions/{case}.json"));
        let err = load_definition(&path).expect_err(case);
        let line = marker.map(|m| line_of(&path, m));
        assert_located(&err, &path, line, field, fragment);
    }
}

#[test]
fn expression_naming_an_undeclared_axis_is_rejected_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("definition.json");
    let text = std::fs::read_to_string(fixture("good/small/definition.json"))
        .unwrap()
        .replace("\"hidden * 2\"", "\"hiden * 2\"");
    std::fs::write(&path, text).unwrap();
    let err = load_definition(&path).unwrap_err();
    assert_located(
        &err,
        &path,
        None,
        "axes.double.expression",
        "unknown name `hiden`",
    );
}

#[test]
fn run_must_be_a_top_level_function() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("definition.json");
    let good = std::fs::read_to_string(fixture("good/small/definition.json")).unwrap();
    for (what, from, to) in [
        ("a longer name", "def run(x, eps)", "def runner(x, eps)"),
        (
            "a method",
            "\\n\\n\\ndef run(x, eps)",
            "\\n\\n\\nclass K:\\n  def run(x, eps)",
        ),
        ("a comment", "def run(x, eps)", "# def run(x, eps)"),
    ] {
        assert!(good.contains(from), "{what}");
        std::fs::write(&path, good.replace(from, to)).unwrap();
        let err = load_definition(&path).expect_err(what);
        assert_located(&err, &path, None, "reference", "does not define `run`");
    }
}

#[test]
fn problem_directory_without_workloads_names_the_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("good/small/definition.json"),
        dir.path().join("definition.json"),
    )
    .unwrap();
    let err = Problem::load(dir.path()).unwrap_err();
    assert!(
        matches!(err, ContractError::MissingFile { ref file, .. } if file == "workload.jsonl"),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&dir.path().display().to_string()) && msg.contains("`workload.jsonl`"),
        "{msg}"
    );
}

#[test]
fn definition_error_stops_the_problem_before_workloads() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture("bad/definitions/wrong_dtype.json"),
        dir.path().join("definition.json"),
    )
    .unwrap();
    std::fs::copy(
        fixture("good/small/workload.jsonl"),
        dir.path().join("workload.jsonl"),
    )
    .unwrap();
    let err = Problem::load(dir.path()).unwrap_err();
    assert_eq!(
        err.location().unwrap().path,
        dir.path().join("definition.json")
    );
}

#[test]
fn solution_errors_name_file_and_field() {
    let cases: &[(&str, Option<&str>, &str, &str)] = &[
        (
            "entry_not_in_sources",
            None,
            "spec.entry_point",
            "names file `main.py`, which is not among `sources` (kernel.py)",
        ),
        (
            "entry_without_function",
            None,
            "spec.entry_point",
            "`kernel.py` is not of the form `file.py::function`",
        ),
        (
            "entry_two_separators",
            None,
            "spec.entry_point",
            "`kernel.py::Mod::run` is not of the form",
        ),
        (
            "duplicate_source_path",
            None,
            "sources[1].path",
            "`kernel.py` repeats the path of `sources[0]`",
        ),
        (
            "path_escapes",
            None,
            "sources[1].path",
            "`../outside.py` escapes the solution directory",
        ),
        (
            "no_languages",
            None,
            "spec.languages",
            "empty; expected e.g. [\"triton\"]",
        ),
        (
            "dps_not_bool",
            Some("\"yes\""),
            "spec.destination_passing_style",
            "invalid type: string \"yes\", expected a boolean",
        ),
        (
            "missing_entry_point",
            Some("  },"),
            "spec",
            "missing field `entry_point`",
        ),
    ];
    for &(case, marker, field, fragment) in cases {
        let path = fixture(&format!("bad/solutions/{case}.json"));
        let err = load_solution(&path).expect_err(case);
        let line = marker.map(|m| line_of(&path, m));
        assert_located(&err, &path, line, field, fragment);
    }
}

#[test]
fn trace_nullable_errors_name_line_and_field() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "passed_without_performance",
            "evaluation.performance",
            "is null or absent, but status PASSED requires it",
        ),
        (
            "passed_without_correctness",
            "evaluation.correctness",
            "is null or absent, but status PASSED requires it",
        ),
        (
            "numerical_with_performance",
            "evaluation.performance",
            "is present, but status INCORRECT_NUMERICAL must not carry it",
        ),
        (
            "numerical_without_correctness",
            "evaluation.correctness",
            "status INCORRECT_NUMERICAL requires it",
        ),
        (
            "runtime_error_with_correctness",
            "evaluation.correctness",
            "status RUNTIME_ERROR must not carry it",
        ),
        (
            "timeout_with_performance",
            "evaluation.performance",
            "status TIMEOUT must not carry it",
        ),
        (
            "unknown_status",
            "evaluation.status",
            "unknown variant `PASSED_MOSTLY`, expected one of `PASSED`",
        ),
    ];
    for &(case, field, fragment) in cases {
        let path = fixture(&format!("bad/traces/{case}.jsonl"));
        let err = load_traces(&path).expect_err(case);
        assert_located(&err, &path, Some(3), field, fragment);
    }
}
