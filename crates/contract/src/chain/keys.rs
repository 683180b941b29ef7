//! Ed25519 keys (generation and key files), run ids, and checking a seal or signature.

use std::io::Write;
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

use super::error::{ChainError, io_err};
use super::{PUBLIC_KEY_TAG, SECRET_KEY_TAG};
use crate::io::sha256_hex;

/// A private Ed25519 key, read by kg-bench only (never handed to a worker).
pub struct TraceSigner {
    key: SigningKey,
}

impl std::fmt::Debug for TraceSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        write!(f, "TraceSigner({})", self.public_hex())
    }
}

impl TraceSigner {
    /// The public key, hex.
    pub fn public_hex(&self) -> String {
        hex(&self.key.verifying_key().to_bytes())
    }

    pub(super) fn seal(&self, message: &[u8]) -> String {
        format!("ed25519:{}", hex(&self.key.sign(message).to_bytes()))
    }
}

/// A trusted Ed25519 public key (`verify --pubkey`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    key: VerifyingKey,
}

impl TrustedKey {
    /// The key, hex (as in a line's `signer`).
    pub fn hex(&self) -> String {
        hex(&self.key.to_bytes())
    }

    /// Parses a hex public key.
    pub fn from_hex(s: &str) -> Option<TrustedKey> {
        let b: [u8; 32] = unhex(s)?.try_into().ok()?;
        VerifyingKey::from_bytes(&b)
            .ok()
            .map(|key| TrustedKey { key })
    }
}

/// Lower-case hex of bytes.
fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Bytes of lower-case or upper-case hex; `None` when malformed.
pub(super) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn random_bytes<const N: usize>() -> Result<[u8; N], ChainError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| ChainError::Random(e.to_string()))?;
    Ok(b)
}

/// A fresh run id: 128 random bits, hex.
pub fn new_run_id() -> Result<String, ChainError> {
    Ok(hex(&random_bytes::<16>()?))
}

/// The public key file written beside a private key: `<private>.pub`.
pub fn public_key_path(secret: &Path) -> PathBuf {
    let mut s = secret.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

/// Writes a new key pair: `secret` (mode 0600, never overwritten) and `<secret>.pub`.
/// Returns the public key.
pub fn generate_key(secret: &Path) -> Result<TrustedKey, ChainError> {
    let seed = random_bytes::<32>()?;
    let key = SigningKey::from_bytes(&seed);
    let public = TrustedKey {
        key: key.verifying_key(),
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(secret).map_err(io_err("create", secret))?;
    f.write_all(format!("{SECRET_KEY_TAG} {}\n", hex(&seed)).as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io_err("write", secret))?;
    let pub_path = public_key_path(secret);
    crate::io::write_atomic(
        &pub_path,
        format!("{PUBLIC_KEY_TAG} {}\n", public.hex()).as_bytes(),
    )?;
    Ok(public)
}

fn read_key_line(path: &Path, tag: &str) -> Result<Vec<u8>, ChainError> {
    let text = std::fs::read_to_string(path).map_err(io_err("read", path))?;
    let bad = |message: String| ChainError::Key {
        path: path.to_path_buf(),
        message,
    };
    let mut words = text.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some(t), Some(h), None) if t == tag => {
            unhex(h).ok_or_else(|| bad("the key is not hex".into()))
        }
        _ => Err(bad(format!(
            "expected one line `{tag} <64 hex digits>` (as `kg-bench keygen` writes)"
        ))),
    }
}

/// Reads a private key written by [`generate_key`]; refuses one that others may read.
pub fn load_signing_key(path: &Path) -> Result<TraceSigner, ChainError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(io_err("read", path))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(ChainError::Key {
                path: path.to_path_buf(),
                message: format!(
                    "mode {:o} lets others read the private key; run `chmod 600` on it",
                    mode & 0o777
                ),
            });
        }
    }
    let bytes: [u8; 32] = read_key_line(path, SECRET_KEY_TAG)?
        .try_into()
        .map_err(|_| ChainError::Key {
            path: path.to_path_buf(),
            message: "the private key must be 32 bytes (64 hex digits)".into(),
        })?;
    Ok(TraceSigner {
        key: SigningKey::from_bytes(&bytes),
    })
}

/// Reads a public key written by [`generate_key`] (`<secret>.pub`).
pub fn load_public_key(path: &Path) -> Result<TrustedKey, ChainError> {
    let bytes = read_key_line(path, PUBLIC_KEY_TAG)?;
    let bad = || ChainError::Key {
        path: path.to_path_buf(),
        message: "not a valid Ed25519 public key (32 bytes, 64 hex digits)".into(),
    };
    let b: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
    VerifyingKey::from_bytes(&b)
        .map(|key| TrustedKey { key })
        .map_err(|_| bad())
}

/// Checks a seal: `Ok(Some(signer))` for a valid signature, `Ok(None)` for a valid unsigned
/// seal, `Err(why)` otherwise.
pub(super) fn check_seal(
    seal: &str,
    signer: Option<&str>,
    message: &[u8],
) -> Result<Option<String>, String> {
    match (seal.split_once(':'), signer) {
        (Some(("sha256", h)), None) => {
            if h == sha256_hex(message) {
                Ok(None)
            } else {
                Err("its seal does not match its content: the line was changed after it was written".into())
            }
        }
        (Some(("sha256", _)), Some(_)) => Err(
            "names a signer but its seal is an unsigned hash: the signature was replaced".into(),
        ),
        (Some(("ed25519", sig)), Some(pk)) => {
            let key = TrustedKey::from_hex(pk)
                .ok_or_else(|| format!("its signer `{pk}` is not an Ed25519 public key"))?;
            let sig: [u8; 64] = unhex(sig)
                .and_then(|b| b.try_into().ok())
                .ok_or("its signature is not 64 bytes of hex")?;
            let sig = ed25519_dalek::Signature::from_bytes(&sig);
            key.key
                .verify_strict(message, &sig)
                .map(|()| Some(pk.to_string()))
                .map_err(|_| {
                    "its signature does not verify: the line was changed after it was signed, or forged".to_string()
                })
        }
        (Some(("ed25519", _)), None) => Err("is signed but names no signer".into()),
        _ => Err(format!("unknown seal `{seal}`")),
    }
}
