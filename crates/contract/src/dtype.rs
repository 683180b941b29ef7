//! The dtype table shared by every crate.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A tensor element type, spelled as PyTorch and SOL-ExecBench spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    /// IEEE binary64.
    Float64,
    /// IEEE binary32.
    Float32,
    /// IEEE binary16.
    Float16,
    /// bfloat16.
    Bfloat16,
    /// OCP FP8 E4M3 (finite, no infinities).
    #[serde(rename = "float8_e4m3fn")]
    Float8E4m3fn,
    /// OCP FP8 E5M2.
    #[serde(rename = "float8_e5m2")]
    Float8E5m2,
    /// AMD FP8 E4M3 (finite, unsigned zero).
    #[serde(rename = "float8_e4m3fnuz")]
    Float8E4m3fnuz,
    /// AMD FP8 E5M2 (finite, unsigned zero).
    #[serde(rename = "float8_e5m2fnuz")]
    Float8E5m2fnuz,
    /// FP4 E2M1 (one value per element, unpacked).
    #[serde(rename = "float4_e2m1")]
    Float4E2m1,
    /// FP4 E2M1, two values packed per byte.
    #[serde(rename = "float4_e2m1fn_x2")]
    Float4E2m1fnX2,
    /// Signed 64-bit integer.
    Int64,
    /// Signed 32-bit integer.
    Int32,
    /// Signed 16-bit integer.
    Int16,
    /// Signed 8-bit integer.
    Int8,
    /// Unsigned 8-bit integer.
    Uint8,
    /// Boolean (one byte per element in PyTorch).
    Bool,
}

impl DType {
    /// Every dtype, in table order.
    pub const ALL: [DType; 16] = [
        DType::Float64,
        DType::Float32,
        DType::Float16,
        DType::Bfloat16,
        DType::Float8E4m3fn,
        DType::Float8E5m2,
        DType::Float8E4m3fnuz,
        DType::Float8E5m2fnuz,
        DType::Float4E2m1,
        DType::Float4E2m1fnX2,
        DType::Int64,
        DType::Int32,
        DType::Int16,
        DType::Int8,
        DType::Uint8,
        DType::Bool,
    ];

    /// The name used in JSON and by `torch.<name>`.
    pub fn name(self) -> &'static str {
        match self {
            DType::Float64 => "float64",
            DType::Float32 => "float32",
            DType::Float16 => "float16",
            DType::Bfloat16 => "bfloat16",
            DType::Float8E4m3fn => "float8_e4m3fn",
            DType::Float8E5m2 => "float8_e5m2",
            DType::Float8E4m3fnuz => "float8_e4m3fnuz",
            DType::Float8E5m2fnuz => "float8_e5m2fnuz",
            DType::Float4E2m1 => "float4_e2m1",
            DType::Float4E2m1fnX2 => "float4_e2m1fn_x2",
            DType::Int64 => "int64",
            DType::Int32 => "int32",
            DType::Int16 => "int16",
            DType::Int8 => "int8",
            DType::Uint8 => "uint8",
            DType::Bool => "bool",
        }
    }

    /// Parses a dtype name; accepts a `torch.` prefix.
    pub fn parse(s: &str) -> Option<DType> {
        let s = s.strip_prefix("torch.").unwrap_or(s);
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Storage bits per tensor element (a packed `float4_e2m1fn_x2` element holds two values in 8 bits).
    pub fn bits(self) -> u32 {
        match self {
            DType::Float64 | DType::Int64 => 64,
            DType::Float32 | DType::Int32 => 32,
            DType::Float16 | DType::Bfloat16 | DType::Int16 => 16,
            DType::Float8E4m3fn
            | DType::Float8E5m2
            | DType::Float8E4m3fnuz
            | DType::Float8E5m2fnuz
            | DType::Int8
            | DType::Uint8
            | DType::Bool
            | DType::Float4E2m1fnX2 => 8,
            DType::Float4E2m1 => 4,
        }
    }

    /// Bytes needed to store `elements` elements of this dtype, rounded up to whole bytes.
    pub fn bytes_for(self, elements: u64) -> u64 {
        (elements * u64::from(self.bits())).div_ceil(8)
    }

    /// The largest finite magnitude of a floating-point type (`None` for integers and bool):
    /// a scalar input beyond it is no longer finite once the reference computes in this type.
    pub fn max_finite(self) -> Option<f64> {
        match self {
            DType::Float64 => Some(f64::MAX),
            DType::Float32 => Some(f64::from(f32::MAX)),
            DType::Float16 => Some(65504.0),
            DType::Bfloat16 => Some(3.389_531_389_251_535_5e38),
            DType::Float8E4m3fn => Some(448.0),
            DType::Float8E5m2 | DType::Float8E5m2fnuz => Some(57344.0),
            DType::Float8E4m3fnuz => Some(240.0),
            DType::Float4E2m1 | DType::Float4E2m1fnX2 => Some(6.0),
            _ => None,
        }
    }

    /// The inclusive range of an integer type or bool (`None` for floating-point types).
    pub fn int_range(self) -> Option<(i64, i64)> {
        match self {
            DType::Int64 => Some((i64::MIN, i64::MAX)),
            DType::Int32 => Some((i32::MIN.into(), i32::MAX.into())),
            DType::Int16 => Some((i16::MIN.into(), i16::MAX.into())),
            DType::Int8 => Some((i8::MIN.into(), i8::MAX.into())),
            DType::Uint8 => Some((0, u8::MAX.into())),
            DType::Bool => Some((0, 1)),
            _ => None,
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        !matches!(
            self,
            DType::Int64 | DType::Int32 | DType::Int16 | DType::Int8 | DType::Uint8 | DType::Bool
        )
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde_and_parse() {
        for d in DType::ALL {
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{}\"", d.name()));
            assert_eq!(serde_json::from_str::<DType>(&json).unwrap(), d);
            assert_eq!(DType::parse(d.name()), Some(d));
            assert_eq!(DType::parse(&format!("torch.{}", d.name())), Some(d));
        }
        assert_eq!(DType::parse("float33"), None);
    }

    #[test]
    fn byte_sizes() {
        assert_eq!(DType::Bfloat16.bytes_for(3), 6);
        assert_eq!(DType::Float8E4m3fn.bytes_for(5), 5);
        assert_eq!(DType::Float4E2m1.bytes_for(3), 2);
        assert_eq!(DType::Float64.bytes_for(2), 16);
        assert!(!DType::Bool.is_float());
        assert!(DType::Float8E5m2.is_float());
    }

    #[test]
    fn ranges_cover_every_type_once() {
        for d in DType::ALL {
            assert_ne!(d.max_finite().is_some(), d.int_range().is_some(), "{d}");
            assert_eq!(d.max_finite().is_some(), d.is_float(), "{d}");
        }
        assert_eq!(DType::Float32.max_finite(), Some(3.4028234663852886e38));
        assert_eq!(DType::Uint8.int_range(), Some((0, 255)));
    }
}
