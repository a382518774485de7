//! A PKCS#12 bundle (`TlsCertificate.pkcs12`) given inline, as far as BoringSSL's
//! `PKCS12_parse` decides without decrypting it: bytes that are no PFX structure at all, and
//! a MAC the context's password does not verify (an empty password tried both as PKCS#12's
//! empty string and as none, as BoringSSL tries it), are "Failed to load pkcs12 from
//! <inline>".
//!
//! Owns: those verdicts. Must not: guess. A bundle in BER (which BoringSSL converts), a MAC
//! by a digest other than SHA-1 or SHA-256, and what the encrypted contents hold (the key,
//! the certificate, whether they match) are not judged.

use hmac::{Hmac, Mac};
use sha2::Digest;

use super::der::{Der, CONSTRUCTED, CONTEXT, INTEGER, OCTET_STRING, OID, SEQUENCE};
use super::memo::Memo;

/// id-data, 1.2.840.113549.1.7.1.
const DATA: [u8; 9] = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x01];
/// id-sha1, 1.3.14.3.2.26.
const SHA1: [u8; 5] = [0x2b, 0x0e, 0x03, 0x02, 0x1a];
/// id-sha256, 2.16.840.1.101.3.4.2.1.
const SHA256: [u8; 9] = [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];

/// The most MAC iterations judged here (OpenSSL writes 2,048).
const MAX_ITERATIONS: u64 = 1 << 20;

/// Whether BoringSSL refuses the bundle before decrypting it: `Err` when it does.
pub fn judge(der: &[u8], password: &[u8]) -> Result<(), ()> {
    // Its MAC key takes thousands of digests: judged once per bundle and password (`memo`).
    static JUDGED: Memo<Result<(), ()>> = Memo::new();
    JUDGED.get(&[der, password], || judge_now(der, password))
}

fn judge_now(der: &[u8], password: &[u8]) -> Result<(), ()> {
    if der.first() != Some(&SEQUENCE) {
        return Err(());
    }
    let Some(parsed) = pfx(der) else {
        // A SEQUENCE this strict reader does not take (BER, say): not judged.
        return Ok(());
    };
    let Some(mac) = parsed.mac else {
        return Ok(());
    };
    let verifies = |encoded: &[u8]| mac.verifies(parsed.content, encoded);
    let ok = match mac.verifies(parsed.content, &bmp(password, true)) {
        None => return Ok(()),
        Some(true) => true,
        // The empty password, as none at all.
        Some(false) if password.is_empty() => verifies(&[]).unwrap_or(true),
        Some(false) => false,
    };
    if ok {
        Ok(())
    } else {
        Err(())
    }
}

/// A password as PKCS#12 encodes it: UTF-16BE, with a terminating NUL.
fn bmp(password: &[u8], terminated: bool) -> Vec<u8> {
    let mut out: Vec<u8> = String::from_utf8_lossy(password)
        .encode_utf16()
        .flat_map(u16::to_be_bytes)
        .collect();
    if terminated {
        out.extend([0, 0]);
    }
    out
}

struct Pfx<'a> {
    /// The `authSafe` data the MAC covers.
    content: &'a [u8],
    mac: Option<MacData<'a>>,
}

struct MacData<'a> {
    algorithm: &'a [u8],
    digest: &'a [u8],
    salt: &'a [u8],
    iterations: u64,
}

fn pfx(der: &[u8]) -> Option<Pfx<'_>> {
    let mut outer = Der(der);
    let mut pfx = Der(outer.get(SEQUENCE)?);
    if !outer.0.is_empty() {
        return None;
    }
    pfx.get(INTEGER)?;
    let mut auth_safe = Der(pfx.get(SEQUENCE)?);
    if auth_safe.get(OID)? != DATA {
        return None;
    }
    let mut explicit = Der(auth_safe.get(CONTEXT | CONSTRUCTED)?);
    let content = explicit.get(OCTET_STRING)?;
    let mac = match pfx.optional(SEQUENCE).ok()? {
        None => None,
        Some(mac_data) => {
            let mut mac_data = Der(mac_data);
            let mut digest_info = Der(mac_data.get(SEQUENCE)?);
            let mut algorithm = Der(digest_info.get(SEQUENCE)?);
            let algorithm = algorithm.get(OID)?;
            let digest = digest_info.get(OCTET_STRING)?;
            let salt = mac_data.get(OCTET_STRING)?;
            let iterations = match mac_data.optional(INTEGER).ok()? {
                None => 1,
                Some(bytes) if bytes.len() <= 8 && bytes.first().is_some_and(|b| b & 0x80 == 0) => {
                    bytes.iter().fold(0u64, |n, &b| n << 8 | u64::from(b))
                }
                Some(_) => return None,
            };
            Some(MacData {
                algorithm,
                digest,
                salt,
                iterations,
            })
        }
    };
    Some(Pfx { content, mac })
}

impl MacData<'_> {
    /// Whether the MAC verifies with this encoded password; `None` for a digest not known
    /// here or an iteration count past what is judged.
    fn verifies(&self, content: &[u8], password: &[u8]) -> Option<bool> {
        if self.iterations == 0 || self.iterations > MAX_ITERATIONS {
            return None;
        }
        if self.algorithm == SHA1 {
            let key = kdf::<sha1::Sha1>(self.salt, password, self.iterations, 20);
            let mut mac = Hmac::<sha1::Sha1>::new_from_slice(&key).ok()?;
            mac.update(content);
            Some(mac.verify_slice(self.digest).is_ok())
        } else if self.algorithm == SHA256 {
            let key = kdf::<sha2::Sha256>(self.salt, password, self.iterations, 32);
            let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).ok()?;
            mac.update(content);
            Some(mac.verify_slice(self.digest).is_ok())
        } else {
            None
        }
    }
}

/// PKCS#12's key derivation for the MAC key (RFC 7292, appendix B.2, ID 3), for digests
/// with 64-byte blocks.
fn kdf<D: Digest>(salt: &[u8], password: &[u8], iterations: u64, length: usize) -> Vec<u8> {
    const V: usize = 64;
    let fill = |bytes: &[u8]| -> Vec<u8> {
        if bytes.is_empty() {
            return Vec::new();
        }
        let len = V * bytes.len().div_ceil(V);
        bytes.iter().copied().cycle().take(len).collect()
    };
    let mut i: Vec<u8> = fill(salt);
    i.extend(fill(password));
    let d = [3u8; V];
    let mut out = Vec::with_capacity(length);
    while out.len() < length {
        let mut a = D::new()
            .chain_update(d)
            .chain_update(&i)
            .finalize()
            .to_vec();
        for _ in 1..iterations {
            a = D::digest(&a).to_vec();
        }
        out.extend_from_slice(&a);
        if out.len() >= length {
            break;
        }
        let b: Vec<u8> = a.iter().copied().cycle().take(V).collect();
        for block in i.chunks_mut(V) {
            let mut carry = 1u16;
            for (x, y) in block.iter_mut().zip(&b).rev() {
                let sum = u16::from(*x) + u16::from(*y) + carry;
                *x = sum as u8;
                carry = sum >> 8;
            }
        }
    }
    out.truncate(length);
    out
}

#[cfg(test)]
mod tests {
    use super::{bmp, judge};

    #[test]
    fn what_is_no_pfx_is_refused_and_a_sequence_not_read_here_is_not() {
        assert_eq!(judge(b"junk", b""), Err(()));
        assert_eq!(judge(&[0x30, 0x80, 0, 0], b""), Ok(()));
    }

    #[test]
    fn a_password_is_utf16_with_a_terminator() {
        assert_eq!(bmp(b"pw", true), [0, b'p', 0, b'w', 0, 0]);
        assert_eq!(bmp(b"", false), Vec::<u8>::new());
    }
}
