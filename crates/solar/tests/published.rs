//! The port's SOLAR names and published file set: backend aliases parse, and an analysis
//! directory holds operator graph, the path's IR file, conversion attestation, record and
//! manifest, each bound by SHA-256.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use indexmap::IndexMap;
use kg_solar::ExtractionPath;
use kg_solar::analysis::{
    ATTESTATION_FILE, Analysis, AnalysisRecord, Bound, ConversionAttestation,
    missing_published_files, read_verified, write_analysis,
};
use kg_solar::graph::OperatorGraph;
use kg_solar::ir::{IrGraph, Totals};

fn analysis(backend: ExtractionPath, def_sha: &str, sha: &str) -> Analysis {
    Analysis {
        graph: OperatorGraph {
            backend,
            torch_version: "x".into(),
            tensors: IndexMap::new(),
            inputs: vec![],
            outputs: vec![],
            ops: vec![],
            ignored: vec![],
        },
        ir: IrGraph {
            backend,
            ops: vec![],
            input_bytes: IndexMap::new(),
            output_bytes: IndexMap::new(),
        },
        record: AnalysisRecord {
            schema_version: 1,
            tool_version: "0".into(),
            definition: "p".into(),
            definition_sha256: def_sha.into(),
            workload: "w".into(),
            axes: IndexMap::new(),
            backend,
            hardware: "rx9060xt".into(),
            hardware_sha256: sha.into(),
            torch_version: "x".into(),
            totals: Totals::default(),
            t_tensor_ms: 0.0,
            t_vector_ms: 0.0,
            t_compute_ms: 0.0,
            t_memory_unfused_ms: 1.0,
            t_memory_fused_ms: 1.0,
            t_sol_ms: 1.0,
            bound: Bound::Memory,
            arithmetic_intensity: 0.0,
            tensor_rates: IndexMap::new(),
            replay_checked: 3,
            replay_traced_only: 1,
        },
    }
}

#[test]
fn port_backend_names_are_aliases_of_ours() {
    assert_eq!(
        "make_fx_aten".parse::<ExtractionPath>().unwrap(),
        ExtractionPath::Aten
    );
    assert_eq!(
        "torchview_extended_einsum"
            .parse::<ExtractionPath>()
            .unwrap(),
        ExtractionPath::Fx
    );
    assert_eq!(
        "aten".parse::<ExtractionPath>().unwrap(),
        ExtractionPath::Aten
    );
    let err = "torchview".parse::<ExtractionPath>().unwrap_err();
    assert!(
        err.to_string().contains("torchview_extended_einsum"),
        "{err}"
    );
    let b: ExtractionPath = serde_json::from_str("\"make_fx_aten\"").unwrap();
    assert_eq!(b, ExtractionPath::Aten);
    // Ours is what is written.
    assert_eq!(
        serde_json::to_string(&ExtractionPath::Fx).unwrap(),
        "\"fx\""
    );
    assert_eq!(ExtractionPath::Fx.port_name(), "torchview_extended_einsum");
}

#[test]
fn an_analysis_directory_is_the_ports_published_file_set() {
    let hw = kg_solar::hardware::load("rx9060xt").unwrap();
    let def_sha = "a".repeat(64);
    for (backend, ir) in [
        (ExtractionPath::Fx, "einsum_graph.yaml"),
        (ExtractionPath::Aten, "aten_graph.yaml"),
    ] {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("p/w");
        let m = write_analysis(&dir, &analysis(backend, &def_sha, &hw.sha256), &hw).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut want = vec![
            "conversion-attestation.yaml",
            "manifest.yaml",
            "operator_graph.yaml",
            "solar-analysis.yaml",
            ir,
        ];
        want.sort();
        assert_eq!(names, want, "{backend}");
        assert!(missing_published_files(&m).is_empty());
        let text = std::fs::read_to_string(dir.join(ATTESTATION_FILE)).unwrap();
        let att: ConversionAttestation = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(att.statement_type, "https://in-toto.io/Statement/v1");
        assert_eq!(att.predicate.ir_path, backend.port_name());
        assert!(!att.predicate.numerical_replay);
        assert_eq!(att.predicate.replay_checked, 3);
        // The attestation binds the graph files as written.
        let ir_sha = kg_contract::io::sha256_file(&dir.join(ir)).unwrap();
        assert!(
            att.subject
                .iter()
                .any(|s| s.name == ir && s.digest.sha256 == ir_sha),
            "{text}"
        );
        assert_eq!(att.subject[0].digest.sha256, def_sha);
        read_verified(&dir).unwrap();
        // Tampering with the attestation is caught by the manifest.
        std::fs::write(dir.join(ATTESTATION_FILE), text.replace("passed", "failed")).unwrap();
        assert!(read_verified(&dir).is_err());
        let mut old = m.clone();
        old.files.shift_remove(ATTESTATION_FILE);
        assert_eq!(missing_published_files(&old), [ATTESTATION_FILE]);
    }
}
