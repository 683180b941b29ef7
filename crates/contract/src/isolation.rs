//! Which confinement layers held around a candidate worker, as kg-exec observed them from
//! outside the running process (never as the candidate reported them). Recorded in every
//! trace (`environment.isolation`), so a reviewer sees what a PASS ran under, and checked by
//! `--require-sandbox`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One confinement layer of the candidate sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// Its own, empty network namespace (no network, no abstract sockets of the host).
    NetworkNamespace,
    /// Process 1 of its own PID namespace with its own `/proc`.
    PidNamespace,
    /// Its own mount namespace in which every mount is read-only except its scratch,
    /// transfer and cache directories and its private temp mounts.
    ReadOnlyFilesystem,
    /// `/tmp` and `/dev/shm` are private tmpfs mounts, discarded with it.
    PrivateTmp,
    /// It runs as an unprivileged uid (not root, also when kernelgate runs as root).
    UnprivilegedUser,
    /// No effective, permitted or bounding capabilities.
    NoCapabilities,
    /// `no_new_privs`: no set-uid or file-capability binary can raise its privileges.
    NoNewPrivs,
    /// A seccomp filter refuses mount, ptrace, namespace and kernel-keyring calls.
    Seccomp,
    /// A memory limit (RLIMIT_DATA per process).
    MemoryLimit,
    /// A process limit that holds (RLIMIT_NPROC of a uid that is not root).
    ProcessLimit,
    /// A file-size limit (RLIMIT_FSIZE).
    FileSizeLimit,
}

impl Layer {
    /// Every layer, in the order reports list them.
    pub const ALL: [Layer; 11] = [
        Layer::NetworkNamespace,
        Layer::PidNamespace,
        Layer::ReadOnlyFilesystem,
        Layer::PrivateTmp,
        Layer::UnprivilegedUser,
        Layer::NoCapabilities,
        Layer::NoNewPrivs,
        Layer::Seccomp,
        Layer::MemoryLimit,
        Layer::ProcessLimit,
        Layer::FileSizeLimit,
    ];

    /// The snake_case name, as serialised.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::NetworkNamespace => "network_namespace",
            Layer::PidNamespace => "pid_namespace",
            Layer::ReadOnlyFilesystem => "read_only_filesystem",
            Layer::PrivateTmp => "private_tmp",
            Layer::UnprivilegedUser => "unprivileged_user",
            Layer::NoCapabilities => "no_capabilities",
            Layer::NoNewPrivs => "no_new_privs",
            Layer::Seccomp => "seccomp",
            Layer::MemoryLimit => "memory_limit",
            Layer::ProcessLimit => "process_limit",
            Layer::FileSizeLimit => "file_size_limit",
        }
    }
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One layer as observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LayerState {
    /// The layer.
    pub layer: Layer,
    /// Whether it held on the running process.
    pub held: bool,
    /// What was seen (e.g. `uid 61904`, `CapEff 0`, or why it is missing).
    pub detail: String,
}

/// The candidate's confinement as observed from outside it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IsolationReport {
    /// `false` when the sandbox was turned off (`--no-sandbox`); `layers` is then empty.
    pub sandboxed: bool,
    /// Every layer, held or not.
    pub layers: Vec<LayerState>,
}

impl IsolationReport {
    /// The layers that did not hold (every layer when not sandboxed).
    pub fn missing(&self) -> Vec<Layer> {
        if !self.sandboxed {
            return Layer::ALL.to_vec();
        }
        self.layers
            .iter()
            .filter(|l| !l.held)
            .map(|l| l.layer)
            .collect()
    }

    /// A report of every layer as not held, for a worker whose confinement could not be
    /// observed (`why`).
    pub fn unobserved(why: &str) -> IsolationReport {
        IsolationReport {
            sandboxed: true,
            layers: Layer::ALL
                .iter()
                .map(|&layer| LayerState {
                    layer,
                    held: false,
                    detail: why.to_string(),
                })
                .collect(),
        }
    }

    /// The layers that did not hold, each with what was seen: `a (why), b (why)`.
    pub fn missing_detail(&self) -> String {
        self.layers
            .iter()
            .filter(|l| !l.held)
            .map(|l| format!("{} ({})", l.layer, l.detail))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// One line for people: `held: a, b; MISSING: c (why)`.
    pub fn summary(&self) -> String {
        if !self.sandboxed {
            return "isolation: none (--no-sandbox; problem directory content-checked)".into();
        }
        let held: Vec<&str> = self
            .layers
            .iter()
            .filter(|l| l.held)
            .map(|l| l.layer.as_str())
            .collect();
        let mut s = format!("isolation: held {}", held.join(", "));
        let missing = self.missing_detail();
        if !missing.is_empty() {
            s.push_str(&format!("; MISSING {missing}"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_lists_layers_that_did_not_hold_and_everything_when_off() {
        let r = IsolationReport {
            sandboxed: true,
            layers: vec![
                LayerState {
                    layer: Layer::Seccomp,
                    held: false,
                    detail: "Seccomp 0".into(),
                },
                LayerState {
                    layer: Layer::PidNamespace,
                    held: true,
                    detail: String::new(),
                },
            ],
        };
        assert_eq!(r.missing(), vec![Layer::Seccomp]);
        assert!(
            r.summary().contains("MISSING seccomp (Seccomp 0)"),
            "{}",
            r.summary()
        );
        assert_eq!(IsolationReport::default().missing().len(), Layer::ALL.len());
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"layer\":\"seccomp\""), "{json}");
    }
}
