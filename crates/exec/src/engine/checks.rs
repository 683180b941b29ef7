//! Checks made before a solution is evaluated: languages, toolchains, unverified paths.

use super::*;

/// Checks that `sol`'s language can be built and run on `device` with the interpreter
/// `python`, before anything runs ([`crate::toolchain::missing_for`] with kg-bench's
/// environment).
pub fn toolchain_check(
    sol: &Solution,
    device: &crate::placement::DeviceChoice,
    python: &Path,
) -> Result<(), ExecError> {
    match crate::toolchain::missing_for(sol, device, python, &|k| std::env::var_os(k)) {
        None => Ok(()),
        Some(m) => Err(ExecError::ToolchainMissing {
            solution: sol.name.clone(),
            language: m.language,
            missing: m.missing,
            fix: m.fix,
        }),
    }
}

/// The code paths an evaluation of `sol` on `device` takes that have never run on the hardware
/// they target (recorded in each trace's `environment.unverified`).
pub fn unverified_paths(device: &DeviceChoice, sol: &Solution) -> Vec<kg_contract::Unverified> {
    let mut v = Vec::new();
    if matches!(device, DeviceChoice::Rocm(_)) {
        v.push(kg_contract::Unverified::HipEventTiming);
        if sol
            .spec
            .languages
            .iter()
            .any(|l| l.eq_ignore_ascii_case("hip_cpp"))
        {
            v.push(kg_contract::Unverified::HipBuild);
        }
    }
    v
}

/// Checks a solution's languages before anything runs.
pub fn check_languages(sol: &Solution) -> Result<(), ExecError> {
    let bad = sol
        .spec
        .languages
        .iter()
        .any(|l| !SUPPORTED_LANGUAGES.contains(&l.to_lowercase().as_str()));
    let binding_ok = !sol
        .spec
        .languages
        .iter()
        .any(|l| l.eq_ignore_ascii_case("cuda_cpp") || l.eq_ignore_ascii_case("hip_cpp"))
        || matches!(sol.spec.binding.as_deref(), None | Some("torch"));
    if bad || !binding_ok {
        return Err(ExecError::UnsupportedLanguage {
            solution: sol.name.clone(),
            languages: sol.spec.languages.clone(),
            supported: format!(
                "{} (cuda_cpp and hip_cpp with binding `torch`)",
                SUPPORTED_LANGUAGES.join(", ")
            ),
        });
    }
    Ok(())
}
