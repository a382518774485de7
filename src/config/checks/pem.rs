//! PEM as BoringSSL frames it (`PEM_read_bio`, `PEM_bytes_read_bio`): what Envoy 1.40 reads
//! a certificate chain, a private key, a trusted CA bundle or a CRL with.
//!
//! Written here because no crate frames PEM as BoringSSL does, and the differences decide
//! verdicts: a `TRUSTED CERTIFICATE` or `X509 CERTIFICATE` block is a certificate; a line
//! of its own before the data makes what precedes it a header (and a block with a header
//! that is not an encryption header is refused); a data line shorter than 64 characters
//! ends the data; an indented `BEGIN` or `END` line is not one; white space inside the
//! base64 is skipped, but not a character outside its alphabet, a quad left unfinished, or
//! anything after the padding. `tests/rules_envoy.rs` holds each against Envoy.
//!
//! Owns: framing and base64. Must not: parse what a block holds (`tls_bytes` does).

/// One block: its label (`CERTIFICATE`), its header lines (empty but for an old-style
/// encrypted key) and its decoded bytes.
#[derive(Debug)]
pub(super) struct Block {
    pub label: String,
    pub header: String,
    pub data: Vec<u8>,
}

/// Why no block was read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum PemError {
    /// No `BEGIN` line before the end: the only way reading ends well.
    NoStartLine,
    /// A block began but is not a block (its `END` line, its base64, or no bytes at all).
    Malformed,
}

/// Reads blocks one after another, as a BIO over the bytes does.
pub(super) struct Reader<'a> {
    rest: &'a [u8],
}

/// `BIO_gets` with a 254-byte buffer reads at most 253 bytes, up to and with a newline.
const LINE: usize = 253;

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    /// The next line as `PEM_read_bio` keeps it: trailing bytes up to a space (and bytes
    /// with the high bit, a signed `char` below it) cut, a newline put back. `None` at the end.
    fn line(&mut self) -> Option<Vec<u8>> {
        if self.rest.is_empty() {
            return None;
        }
        let limit = self.rest.len().min(LINE);
        let end = self.rest[..limit]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(limit, |i| i + 1);
        let (line, rest) = self.rest.split_at(end);
        self.rest = rest;
        let kept = line
            .iter()
            .rposition(|&b| b > b' ' && b < 0x80)
            .map_or(0, |i| i + 1);
        let mut line = line[..kept].to_vec();
        line.push(b'\n');
        Some(line)
    }

    /// The next block, whatever its label (`PEM_read_bio`).
    pub fn block(&mut self) -> Result<Block, PemError> {
        let label = loop {
            let line = self.line().ok_or(PemError::NoStartLine)?;
            if let Some(rest) = line.strip_prefix(b"-----BEGIN ") {
                if let Some(label) = rest.strip_suffix(b"-----\n") {
                    break String::from_utf8_lossy(label).into_owned();
                }
            }
        };
        let mut last = Vec::new();
        let mut header = Vec::new();
        let mut nohead = false;
        while let Some(line) = self.line() {
            last.clone_from(&line);
            if line == b"\n" {
                break;
            }
            if line.starts_with(b"-----END ") {
                nohead = true;
                break;
            }
            header.extend_from_slice(&line);
        }
        let data = if nohead {
            std::mem::take(&mut header)
        } else {
            let mut data = Vec::new();
            while let Some(line) = self.line() {
                last.clone_from(&line);
                let short = line.len() != 65;
                if line.starts_with(b"-----END ") || line.len() > 65 {
                    break;
                }
                data.extend_from_slice(&line);
                if short {
                    last = self.line().unwrap_or_default();
                    break;
                }
            }
            data
        };
        let end = format!("-----END {label}-----\n");
        if last != end.as_bytes() {
            return Err(PemError::Malformed);
        }
        let data = decode(&data).ok_or(PemError::Malformed)?;
        if data.is_empty() {
            return Err(PemError::Malformed);
        }
        Ok(Block {
            label,
            header: String::from_utf8_lossy(&header).into_owned(),
            data,
        })
    }

    /// The next block whose label `wanted` takes, others skipped (`PEM_bytes_read_bio`).
    pub fn block_for(&mut self, wanted: Wanted) -> Result<Block, PemError> {
        loop {
            let block = self.block()?;
            if wanted.takes(&block.label) {
                return Ok(block);
            }
        }
    }
}

/// What a read asks for, and which labels answer it (`check_pem`).
#[derive(Clone, Copy, Debug)]
pub(super) enum Wanted {
    /// `PEM_read_bio_X509`.
    Certificate,
    /// `PEM_read_bio_X509_AUX`: a trusted certificate too.
    TrustedCertificate,
    /// `PEM_read_bio_PrivateKey`: any private key.
    PrivateKey,
}

impl Wanted {
    fn takes(self, label: &str) -> bool {
        match self {
            Wanted::Certificate => matches!(label, "CERTIFICATE" | "X509 CERTIFICATE"),
            Wanted::TrustedCertificate => matches!(
                label,
                "CERTIFICATE" | "X509 CERTIFICATE" | "TRUSTED CERTIFICATE"
            ),
            Wanted::PrivateKey => matches!(
                label,
                "PRIVATE KEY"
                    | "ENCRYPTED PRIVATE KEY"
                    | "RSA PRIVATE KEY"
                    | "EC PRIVATE KEY"
                    | "DSA PRIVATE KEY"
            ),
        }
    }
}

/// Whether a block's header is an old-style encryption header (`Proc-Type: 4,ENCRYPTED`);
/// an empty header is none.
pub(super) fn encrypted(header: &str) -> bool {
    header.starts_with("Proc-Type: 4,ENCRYPTED")
}

/// `EVP_DecodeUpdate` and `EVP_DecodeFinal`: base64 in quads, white space skipped, padding
/// only in a last quad; bits left over in it are not judged.
fn decode(text: &[u8]) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    };
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut quad = [0u8; 4];
    let mut used = 0;
    let mut finished = false;
    for &c in text {
        if matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
            continue;
        }
        if finished {
            return None;
        }
        quad[used] = c;
        used += 1;
        if used < 4 {
            continue;
        }
        used = 0;
        let padding = match quad {
            [_, _, b'=', b'='] => 2,
            [_, _, _, b'='] => 1,
            _ => 0,
        };
        let mut n = 0u32;
        for &c in &quad[..4 - padding] {
            n = n << 6 | value(c)?;
        }
        n <<= 6 * padding as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - padding]);
        finished = padding > 0;
    }
    (used == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "aGVsbG8gd29ybGQ=";

    fn block(text: &str) -> Result<Block, PemError> {
        Reader::new(text.as_bytes()).block()
    }

    #[test]
    fn a_block_with_text_around_it_is_read() {
        let b = block(&format!(
            "text before\n-----BEGIN X-----\n{BODY}\n-----END X-----\nafter"
        ))
        .expect("a block");
        assert_eq!(
            (b.label.as_str(), b.data.as_slice()),
            ("X", &b"hello world"[..])
        );
        assert!(b.header.is_empty());
    }

    #[test]
    fn framing_that_boringssl_refuses_is_malformed() {
        for text in [
            // An END line that is indented, missing or for another label.
            format!("-----BEGIN X-----\n{BODY}\n  -----END X-----\n"),
            format!("-----BEGIN X-----\n{BODY}\n"),
            format!("-----BEGIN X-----\n{BODY}\n-----END Y-----\n"),
            // A character outside base64, a quad left open, data after the padding.
            "-----BEGIN X-----\naGVs!G8=\n-----END X-----\n".into(),
            "-----BEGIN X-----\naGVsbG8\n-----END X-----\n".into(),
            "-----BEGIN X-----\naGU=aGU=\n-----END X-----\n".into(),
            // No bytes at all.
            "-----BEGIN X-----\n-----END X-----\n".into(),
        ] {
            assert_eq!(block(&text).unwrap_err(), PemError::Malformed, "{text}");
        }
        // An indented BEGIN line is no block at all.
        let text = format!("  -----BEGIN X-----\n{BODY}\n-----END X-----\n");
        assert_eq!(block(&text).unwrap_err(), PemError::NoStartLine);
    }

    #[test]
    fn lines_before_a_blank_line_are_a_header() {
        let b = block(&format!(
            "-----BEGIN X-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,00\n\n{BODY}\n-----END X-----\n"
        ))
        .expect("a block");
        assert!(encrypted(&b.header), "{}", b.header);
        // Data lines of 64 characters go on; a shorter one ends the data.
        let long = "QUFB".repeat(16);
        let b = block(&format!(
            "-----BEGIN X-----\nH: v\n\n{long}\n{BODY}\n-----END X-----\n"
        ))
        .expect("a block");
        assert_eq!(b.data.len(), 48 + 11);
        let text = format!("-----BEGIN X-----\nH: v\n\n{BODY}\n{BODY}\n-----END X-----\n");
        assert_eq!(block(&text).unwrap_err(), PemError::Malformed);
    }

    #[test]
    fn white_space_in_the_data_and_long_lines_are_taken() {
        let long = "QUFB".repeat(100);
        let b = block("-----BEGIN X-----\r\n  aGVs bG8g\r\n\td29ybGQ=\r\n-----END X-----\r\n")
            .expect("a block");
        assert_eq!(b.data, b"hello world");
        let b = block(&format!("-----BEGIN X-----\n{long}\n-----END X-----\n")).expect("a block");
        assert_eq!(b.data.len(), 300);
    }

    #[test]
    fn a_read_for_a_label_skips_other_blocks() {
        let text = format!(
            "-----BEGIN PRIVATE KEY-----\n{BODY}\n-----END PRIVATE KEY-----\n\
             -----BEGIN TRUSTED CERTIFICATE-----\n{BODY}\n-----END TRUSTED CERTIFICATE-----\n"
        );
        let mut reader = Reader::new(text.as_bytes());
        assert_eq!(
            reader.block_for(Wanted::Certificate).unwrap_err(),
            PemError::NoStartLine
        );
        let mut reader = Reader::new(text.as_bytes());
        let b = reader
            .block_for(Wanted::TrustedCertificate)
            .expect("a block");
        assert_eq!(b.label, "TRUSTED CERTIFICATE");
    }
}
