//! Hardware specs as data: one YAML file a device (`crates/solar/hardware/*.yaml`, embedded),
//! every number with its source. A user may pass their own file in the same format.

use std::path::Path;

use kg_contract::DType;
use serde::{Deserialize, Serialize};

use crate::SolarError;

/// A number and where it comes from (datasheet name and date).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sourced {
    /// The value, in the unit the field name says.
    pub value: f64,
    /// Datasheet (or white paper) name and date.
    pub source: String,
}

/// Peak dense tensor throughput by input dtype, TFLOPS.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorPeaks {
    /// FP8 (e4m3 / e5m2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp4: Option<Sourced>,
    /// FP8 (e4m3 / e5m2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8: Option<Sourced>,
    /// bfloat16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16: Option<Sourced>,
    /// float16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp16: Option<Sourced>,
    /// TF32 (fp32 inputs on tensor cores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf32: Option<Sourced>,
    /// Full-precision fp32 matrix units (AMD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp32: Option<Sourced>,
    /// int8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int8: Option<Sourced>,
    /// fp64 matrix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp64: Option<Sourced>,
}

/// One device's spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareSpec {
    /// Short name used on the command line, e.g. `h200`.
    pub name: String,
    /// Marketing name.
    pub display_name: String,
    /// `nvidia` or `amd`.
    pub vendor: String,
    /// Architecture, e.g. `sm_90`, `gfx942`.
    pub arch: String,
    /// Dense tensor peaks by dtype (TFLOPS).
    pub tensor_tflops: TensorPeaks,
    /// Vector fp32 peak (TFLOPS).
    pub vector_fp32_tflops: Sourced,
    /// DRAM (HBM/GDDR) bandwidth (GB/s, 10^9 bytes).
    pub hbm_bandwidth_gbps: Sourced,
    /// Device memory (GB).
    pub memory_gb: Sourced,
    /// L2 cache (MB); informational, not used by the bound.
    pub l2_mb: Sourced,
    /// SMs / CUs.
    pub compute_units: Sourced,
    /// Boost clock (MHz); informational.
    pub boost_clock_mhz: Sourced,
}

/// The built-in specs: (name, YAML text).
pub const BUILTIN: [(&str, &str); 6] = [
    ("h200", include_str!("../hardware/h200.yaml")),
    ("h100", include_str!("../hardware/h100.yaml")),
    ("b200", include_str!("../hardware/b200.yaml")),
    ("mi300x", include_str!("../hardware/mi300x.yaml")),
    ("mi355x", include_str!("../hardware/mi355x.yaml")),
    ("rx9060xt", include_str!("../hardware/rx9060xt.yaml")),
];

/// A spec together with the exact text it was parsed from (hashed into manifests).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedSpec {
    /// The spec.
    pub spec: HardwareSpec,
    /// SHA-256 of the YAML text.
    pub sha256: String,
    /// Where it came from: `builtin:h200` or a path.
    pub origin: String,
}

fn parse(text: &str, origin: &str) -> Result<LoadedSpec, SolarError> {
    let spec: HardwareSpec = serde_saphyr::from_str(text).map_err(|e| SolarError::Hardware {
        origin: origin.to_string(),
        message: e.to_string(),
    })?;
    for (what, v) in [
        ("vector_fp32_tflops", spec.vector_fp32_tflops.value),
        ("hbm_bandwidth_gbps", spec.hbm_bandwidth_gbps.value),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(SolarError::Hardware {
                origin: origin.to_string(),
                message: format!("`{what}` is {v}; expected a positive number"),
            });
        }
    }
    Ok(LoadedSpec {
        spec,
        sha256: kg_contract::io::sha256_hex(text.as_bytes()),
        origin: origin.to_string(),
    })
}

/// Loads a built-in spec by name, or a YAML file when `name_or_path` is not a built-in name.
pub fn load(name_or_path: &str) -> Result<LoadedSpec, SolarError> {
    let key = name_or_path.to_ascii_lowercase();
    if let Some((n, text)) = BUILTIN.iter().find(|(n, _)| *n == key) {
        return parse(text, &format!("builtin:{n}"));
    }
    let p = Path::new(name_or_path);
    if !p.is_file() {
        return Err(SolarError::Hardware {
            origin: name_or_path.to_string(),
            message: format!(
                "not a built-in name ({}) and not a file",
                BUILTIN.map(|(n, _)| n).join(", ")
            ),
        });
    }
    let text = kg_contract::io::read_to_string(p)?;
    parse(&text, &p.display().to_string())
}

impl HardwareSpec {
    /// Tensor peak (TFLOPS) and the field used, for a contraction with this input dtype.
    ///
    /// fp32 inputs are priced at the bf16 (else fp16, tf32, fp32-matrix, vector) rate.
    pub fn tensor_peak(&self, dtype: DType) -> Result<(f64, &'static str), SolarError> {
        let t = &self.tensor_tflops;
        let pick = |o: &Option<Sourced>| o.as_ref().map(|s| s.value);
        let found = match dtype {
            DType::Float8E4m3fn
            | DType::Float8E5m2
            | DType::Float8E4m3fnuz
            | DType::Float8E5m2fnuz => pick(&t.fp8).map(|v| (v, "fp8")),
            DType::Float4E2m1 | DType::Float4E2m1fnX2 => pick(&t.fp4).map(|v| (v, "fp4")),
            DType::Bfloat16 => pick(&t.bf16).map(|v| (v, "bf16")),
            DType::Float16 => pick(&t.fp16).map(|v| (v, "fp16")),
            // References upcast to fp32 and a kernel may compute in 16 bit within tolerance, so
            // (as SOLAR's B200 config does) fp32 MACs are priced at the 16-bit rate: the bound
            // must stay a lower bound.
            DType::Float32 => pick(&t.bf16)
                .map(|v| (v, "bf16"))
                .or(pick(&t.fp16).map(|v| (v, "fp16")))
                .or(pick(&t.tf32).map(|v| (v, "tf32")))
                .or(pick(&t.fp32).map(|v| (v, "fp32")))
                .or(Some((self.vector_fp32_tflops.value, "vector_fp32"))),
            DType::Float64 => pick(&t.fp64).map(|v| (v, "fp64")),
            DType::Int8 | DType::Uint8 => pick(&t.int8).map(|v| (v, "int8")),
            _ => Some((self.vector_fp32_tflops.value, "vector_fp32")),
        };
        found.ok_or_else(|| SolarError::NoRate {
            hardware: self.name.clone(),
            dtype: dtype.name().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_and_cites_sources() {
        for (name, _) in BUILTIN {
            let s = load(name).unwrap();
            assert_eq!(s.spec.name, name);
            assert!(!s.spec.hbm_bandwidth_gbps.source.is_empty());
            assert!(
                s.spec.tensor_peak(DType::Bfloat16).unwrap().0 > s.spec.vector_fp32_tflops.value
            );
        }
    }

    #[test]
    fn dense_not_sparse() {
        // H200 dense BF16 is 989.5 TFLOPS; the datasheet's 1,979 is with 2:4 sparsity.
        let h = load("h200").unwrap().spec;
        assert_eq!(h.tensor_peak(DType::Bfloat16).unwrap().0, 989.5);
        assert_eq!(h.tensor_peak(DType::Float32).unwrap(), (989.5, "bf16"));
        assert_eq!(h.tensor_peak(DType::Float8E4m3fn).unwrap(), (1979.0, "fp8"));
        let m = load("mi300x").unwrap().spec;
        assert_eq!(m.tensor_peak(DType::Float16).unwrap(), (1307.4, "fp16"));
    }

    #[test]
    fn unknown_field_in_user_file_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.yaml");
        let text = BUILTIN[0]
            .1
            .replace("vendor: nvidia", "vendor: nvidia\nbandwith: 3");
        std::fs::write(&p, text).unwrap();
        let err = load(p.to_str().unwrap()).unwrap_err();
        assert!(err.to_string().contains("bandwith"), "{err}");
    }
}
