//! An OCSP staple read as Envoy 1.40 reads one (`source/common/tls/ocsp/ocsp.cc`): one DER
//! `OCSPResponse`, successful, with a basic response for exactly one certificate, whose
//! serial number is the certificate's. Envoy reads the structure with BoringSSL's `CBS`
//! and ignores the signature; so does this, with a reader of the few DER elements it needs.
//!
//! Owns: that verdict, in Envoy's words. Must not: judge what Envoy does not (the
//! signature, the responder, the times: a response produced in the future only warns).

use super::der::{
    Der, CONSTRUCTED, CONTEXT, ENUMERATED, GENERALIZED_TIME, INTEGER, OCTET_STRING, OID, SEQUENCE,
};

/// Envoy's words for an OCSP staple that is not the response for `serial` (the
/// certificate's serial number as its DER integer's contents), or `Ok`.
pub fn judge(der: &[u8], serial: &[u8]) -> Result<(), &'static str> {
    // `readDerEncodedOcspResponse` parses, then refuses bytes left over before it looks at
    // the parse's result: bytes that are no SEQUENCE at all are left over.
    let mut outer = Der(der);
    let Some(sequence) = outer.get(SEQUENCE) else {
        return Err("Data contained more than a single OCSP response");
    };
    if !outer.0.is_empty() {
        return Err("Data contained more than a single OCSP response");
    }
    let parsed = response(sequence)?;
    // `validateResponse`, then `matchesCertificate`.
    let Some(parsed) = parsed else {
        return Ok(());
    };
    if !parsed.successful {
        return Err("OCSP response was unsuccessful");
    }
    match parsed.body {
        Body::None => Err("OCSP response has no body"),
        Body::Unread => Ok(()),
        Body::Serials(serials) => match serials.as_slice() {
            [one] if unsigned(one) == unsigned(serial) => Ok(()),
            [_] => Err("OCSP response does not match its TLS certificate"),
            _ => Err("OCSP Response must be for one certificate only"),
        },
    }
}

fn unsigned(integer: &[u8]) -> &[u8] {
    let start = integer
        .iter()
        .position(|&b| b != 0)
        .unwrap_or(integer.len());
    &integer[start..]
}

/// What `parseOcspResponse` reads.
struct Parsed<'a> {
    successful: bool,
    body: Body<'a>,
}

enum Body<'a> {
    None,
    /// Read only in part here: not judged.
    Unread,
    /// The serial numbers of its single responses.
    Serials(Vec<&'a [u8]>),
}

/// The response (`None` where the structure is one this does not read as far as Envoy does:
/// taken), or Envoy's words for a structure it refuses.
fn response(sequence: &[u8]) -> Result<Option<Parsed<'_>>, &'static str> {
    let unread = |successful| {
        Ok(Some(Parsed {
            successful,
            body: Body::Unread,
        }))
    };
    let mut response = Der(sequence);
    let status = response
        .get(ENUMERATED)
        .ok_or("OCSP ResponseStatus is not a well-formed ASN.1 ENUMERATED")?;
    let successful = match status.first() {
        Some(0) => true,
        Some(1 | 2 | 3 | 5 | 6) => false,
        // Unknown variants, in words with the number: not judged here.
        _ => return Ok(None),
    };
    let Ok(bytes) = response.optional(CONTEXT | CONSTRUCTED) else {
        return Ok(None);
    };
    let Some(bytes) = bytes else {
        return Ok(Some(Parsed {
            successful,
            body: Body::None,
        }));
    };
    let mut bytes = Der(bytes);
    let mut bytes = Der(bytes
        .get(SEQUENCE)
        .ok_or("OCSP ResponseBytes is not a well-formed SEQUENCE")?);
    let Some(oid) = bytes.get(OID) else {
        return Ok(None);
    };
    let basic = bytes
        .get(OCTET_STRING)
        .ok_or("Expected ASN.1 OCTETSTRING for response")?;
    // id-pkix-ocsp-basic, 1.3.6.1.5.5.7.48.1.1.
    if oid != [0x2b, 6, 1, 5, 5, 7, 48, 1, 1] {
        return Ok(None);
    }
    let mut basic = Der(basic);
    let mut basic = Der(basic
        .get(SEQUENCE)
        .ok_or("OCSP BasicOCSPResponse is not a wellf-formed ASN.1 SEQUENCE")?);
    let mut data = Der(basic
        .get(SEQUENCE)
        .ok_or("OCSP ResponseData is not a well-formed ASN.1 SEQUENCE")?);
    // The version, the responder and the time produced: read, not judged here.
    let Ok(_version) = data.optional(CONTEXT | CONSTRUCTED) else {
        return Ok(None);
    };
    let responder = matches!(data.0.first(), Some(0xa1 | 0xa2));
    if !responder || data.any().is_none() || data.get(GENERALIZED_TIME).is_none() {
        return unread(successful);
    }
    let Some(responses) = data.get(SEQUENCE) else {
        return unread(successful);
    };
    let mut responses = Der(responses);
    let mut serials = Vec::new();
    while !responses.0.is_empty() {
        let serial = responses.get(SEQUENCE).and_then(|single| {
            let cert_id = Der(single).get(SEQUENCE)?;
            let mut cert_id = Der(cert_id);
            cert_id.get(SEQUENCE)?;
            cert_id.get(OCTET_STRING)?;
            cert_id.get(OCTET_STRING)?;
            cert_id.get(INTEGER)
        });
        let Some(serial) = serial else {
            return unread(successful);
        };
        serials.push(serial);
    }
    Ok(Some(Parsed {
        successful,
        body: Body::Serials(serials),
    }))
}

#[cfg(test)]
mod tests {
    use super::judge;

    #[test]
    fn only_a_successful_response_with_a_body_is_read() {
        assert_eq!(
            judge(b"hello", &[1]),
            Err("Data contained more than a single OCSP response")
        );
        // SEQUENCE { ENUMERATED internalError }
        assert_eq!(
            judge(&[0x30, 3, 0x0a, 1, 2], &[1]),
            Err("OCSP response was unsuccessful")
        );
        assert_eq!(
            judge(&[0x30, 3, 0x0a, 1, 0], &[1]),
            Err("OCSP response has no body")
        );
        assert_eq!(
            judge(&[0x30, 3, 0x0a, 1, 2, 0], &[1]),
            Err("Data contained more than a single OCSP response")
        );
    }
}
