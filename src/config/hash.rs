//! Content hashes: resource versions, file digests.
//!
//! Must not: know what is hashed (callers give the bytes, in their order).

use sha2::{Digest, Sha256};

/// A short, stable hex digest of byte strings (fed in order, each length-prefixed).
pub fn content_hash<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    let digest = hasher.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}
