//! The few DER elements Envoy's own readers take apart with BoringSSL's `CBS` (an OCSP
//! response, a PKCS#12 bundle's outer layers): definite, minimal lengths, single-byte tags.
//!
//! Owns: reading elements. Must not: judge what they hold (`ocsp`, `pkcs12` do).

/// A DER reader over a slice (`CBS`): definite, minimal lengths; single-byte tags.
pub(super) struct Der<'a>(pub &'a [u8]);

pub(super) const SEQUENCE: u8 = 0x30;
pub(super) const INTEGER: u8 = 0x02;
pub(super) const ENUMERATED: u8 = 0x0a;
pub(super) const OCTET_STRING: u8 = 0x04;
pub(super) const OID: u8 = 0x06;
pub(super) const GENERALIZED_TIME: u8 = 0x18;
pub(super) const CONTEXT: u8 = 0x80;
pub(super) const CONSTRUCTED: u8 = 0x20;

impl<'a> Der<'a> {
    /// The next element's tag and contents (`CBS_get_any_asn1`).
    pub fn any(&mut self) -> Option<(u8, &'a [u8])> {
        let (&tag, rest) = self.0.split_first()?;
        if tag & 0x1f == 0x1f {
            return None;
        }
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 || rest.len() < count {
                return None;
            }
            let (bytes, rest) = rest.split_at(count);
            let len = bytes.iter().fold(0usize, |n, &b| n << 8 | usize::from(b));
            // Minimal: no leading zero, and not what the short form holds.
            if bytes[0] == 0 || len < 0x80 {
                return None;
            }
            (len, rest)
        };
        if rest.len() < len {
            return None;
        }
        let (contents, rest) = rest.split_at(len);
        self.0 = rest;
        Some((tag, contents))
    }

    /// The next element, which must have `tag` (`CBS_get_asn1`).
    pub fn get(&mut self, tag: u8) -> Option<&'a [u8]> {
        if self.0.first() != Some(&tag) {
            return None;
        }
        match self.any()? {
            (t, contents) if t == tag => Some(contents),
            _ => None,
        }
    }

    /// The next element if it has `tag`; `Err` if it does and is malformed
    /// (`CBS_get_optional_asn1`).
    pub fn optional(&mut self, tag: u8) -> Result<Option<&'a [u8]>, ()> {
        if self.0.first() != Some(&tag) {
            return Ok(None);
        }
        self.get(tag).map(Some).ok_or(())
    }
}
