//! A `jwt_authn` provider's `local_jwks` given inline, judged as Envoy 1.40 judges it when it
//! builds the filter (`validateJwtConfig`, with `JwtVerify::Jwks` of `source/common/jwt/`):
//! "Provider 'p' in jwt_authn config has invalid local jwks: Jwks is an invalid JSON".
//!
//! A JWKS is valid when one of its keys is; when none is, Envoy gives the first key's
//! error. A form without `keys` whose every member is a PEM certificate is a set of X.509
//! certificates (their keys RSA).
//!
//! Owns: those verdicts. Must not: guess. What is not known here to be refused (base64 with
//! characters outside the URL-safe alphabet, which absl may read otherwise; RSA numbers
//! BoringSSL's `RSA_check_key` judges beyond an even modulus) is taken.

use prost_reflect::{DynamicMessage, Value as Field};
use serde_json::{Map, Value};

use super::memo::Memo;
use super::pem::{Reader, Wanted};
use super::refusal::{beyond, refuse, Refusal};
use crate::config::fields::{inline_data, message as field};

/// Every provider's inline `local_jwks` (in the order of their names; Envoy's own order
/// over a map is not fixed, so with two bad providers it may name the other).
pub(super) fn jwt_authentication(config: &DynamicMessage, at: &[String]) -> Result<(), Refusal> {
    let Some(providers) = config.get_field_by_name("providers") else {
        return Ok(());
    };
    let Some(providers) = providers.as_map() else {
        return Ok(());
    };
    let mut named: Vec<(String, &DynamicMessage)> = providers
        .iter()
        .filter_map(|(key, value)| match (key, value) {
            (prost_reflect::MapKey::String(name), Field::Message(provider)) => {
                Some((name.clone(), provider))
            }
            _ => None,
        })
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, provider) in named {
        let Some(bytes) = field(provider, "local_jwks").and_then(|s| inline_data(&s)) else {
            continue;
        };
        if bytes.is_empty() {
            continue;
        }
        if let Err(status) = judge(&String::from_utf8_lossy(&bytes)) {
            return refuse(
                &beyond(at, &["providers", &format!("[{name:?}]"), "local_jwks"]),
                format!("Provider '{name}' in jwt_authn config has invalid local jwks: {status}"),
            );
        }
    }
    Ok(())
}

/// `Jwks::createFrom(text, JWKS)`'s status, as `getStatusString` words it.
pub fn judge(text: &str) -> Result<(), &'static str> {
    // The same JWKS on every listener: judged once (`memo`).
    static JUDGED: Memo<Result<(), &'static str>> = Memo::new();
    JUDGED.get(&[text.as_bytes()], || judge_now(text))
}

fn judge_now(text: &str) -> Result<(), &'static str> {
    let Ok(Value::Object(jwks)) = serde_json::from_str::<Value>(text) else {
        return Err("Jwks is an invalid JSON");
    };
    let Some(keys) = jwks.get("keys") else {
        if x509_form(&jwks) {
            return jwks
                .values()
                .try_for_each(|pem| x509(pem.as_str().unwrap_or_default()));
        }
        return Err("Jwks does not have [keys] field");
    };
    let Value::Array(keys) = keys else {
        return Err("[keys] in Jwks is not an array");
    };
    let mut first = None;
    for key in keys {
        let Value::Object(key) = key else { continue };
        match jwk(key) {
            Ok(()) => return Ok(()),
            Err(status) => {
                first.get_or_insert(status);
            }
        }
    }
    Err(first.unwrap_or("Jwks doesn't have any valid public key"))
}

/// A member, as `StructUtils::GetString` reads it: `Ok(None)` when missing, `Err(())` when
/// not a string.
fn string<'a>(object: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, ()> {
    match object.get(name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(()),
    }
}

fn required<'a>(
    object: &'a Map<String, Value>,
    name: &str,
    missing: &'static str,
    wrong: &'static str,
) -> Result<&'a str, &'static str> {
    match string(object, name) {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(missing),
        Err(()) => Err(wrong),
    }
}

fn jwk(key: &Map<String, Value>) -> Result<(), &'static str> {
    let kty = required(
        key,
        "kty",
        "[kty] is missing in [keys]",
        "[kty] is bad in [keys]",
    )?;
    let alg = string(key, "alg").ok().flatten().unwrap_or_default();
    match kty {
        "EC" => ec(key, alg),
        "RSA" => rsa(key, alg),
        "oct" => oct(key, alg),
        "OKP" => okp(key, alg),
        _ => Err("[kty] is not supported in [keys]"),
    }
}

fn ec(key: &Map<String, Value>, alg: &str) -> Result<(), &'static str> {
    if !alg.is_empty() && !alg.starts_with("ES") {
        return Err("[alg] is not started with [ES] for an EC key");
    }
    let crv = string(key, "crv")
        .map_err(|()| "[crv] field is not string for an EC key")?
        .unwrap_or_default();
    let pairs = [("ES256", "P-256"), ("ES384", "P-384"), ("ES512", "P-521")];
    if !alg.is_empty() && !crv.is_empty() && !pairs.contains(&(alg, crv)) {
        return Err("[crv] field specified is not compatible with [alg] for an EC key");
    }
    let curve = if alg.is_empty() && crv.is_empty() {
        "P-256"
    } else {
        pairs
            .iter()
            .find(|(a, c)| *a == alg || *c == crv)
            .map(|(_, c)| *c)
            .ok_or("[crv] or [alg] field is not supported for an EC key")?
    };
    let x = required(
        key,
        "x",
        "[x] field is missing for an EC key",
        "[x] field is not string for an EC key",
    )?;
    let y = required(
        key,
        "y",
        "[y] field is missing for an EC key",
        "[y] field is not string for an EC key",
    )?;
    let (Some(x), Some(y)) = (web_safe(x), web_safe(y)) else {
        return unless_unsure([x, y], "Jwks EC [x] or [y] field is an invalid Base64.");
    };
    if on_curve(curve, &x, &y) {
        Ok(())
    } else {
        Err("Jwks EC [x] and [y] fields have a parse error.")
    }
}

/// Whether (x, y) is a point of the curve (`EC_KEY_set_public_key_affine_coordinates`).
fn on_curve(curve: &str, x: &[u8], y: &[u8]) -> bool {
    let size = match curve {
        "P-256" => 32,
        "P-384" => 48,
        _ => 66,
    };
    let (x, y) = (trimmed(x), trimmed(y));
    if x.len() > size || y.len() > size {
        return false;
    }
    let mut point = vec![4u8];
    for coordinate in [x, y] {
        point.extend(std::iter::repeat_n(0, size - coordinate.len()));
        point.extend_from_slice(coordinate);
    }
    match curve {
        "P-256" => p256::PublicKey::from_sec1_bytes(&point).is_ok(),
        "P-384" => p384::PublicKey::from_sec1_bytes(&point).is_ok(),
        _ => p521::PublicKey::from_sec1_bytes(&point).is_ok(),
    }
}

fn trimmed(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    &bytes[start..]
}

fn rsa(key: &Map<String, Value>, alg: &str) -> Result<(), &'static str> {
    if !alg.is_empty() && !alg.starts_with("RS") && !alg.starts_with("PS") {
        return Err("[alg] is not started with [RS] or [PS] for an RSA key");
    }
    let n = required(
        key,
        "n",
        "[n] field is missing for a RSA key",
        "[n] field is not string for a RSA key",
    )?;
    let e = required(
        key,
        "e",
        "[e] field is missing for a RSA key",
        "[e] field is not string for a RSA key",
    )?;
    const PARSE: &str = "Jwks RSA [n] or [e] field is missing or has a parse error";
    let (Some(n), Some(e)) = (web_safe(n), web_safe(e)) else {
        return unless_unsure([n, e], PARSE);
    };
    let e = trimmed(&e);
    if e != [3] && e != [1, 0, 1] {
        return Err(PARSE);
    }
    // `RSA_check_key`: an odd modulus, at least.
    if trimmed(&n).last().is_none_or(|b| b % 2 == 0) {
        return Err(PARSE);
    }
    Ok(())
}

fn oct(key: &Map<String, Value>, alg: &str) -> Result<(), &'static str> {
    if !alg.is_empty() && !matches!(alg, "HS256" | "HS384" | "HS512") {
        return Err("[alg] does not start with [HS] for an HMAC key");
    }
    let k = required(
        key,
        "k",
        "[k] field is missing for an HMAC key",
        "[k] field is not string for an HMAC key",
    )?;
    match web_safe(k) {
        Some(bytes) if !bytes.is_empty() => Ok(()),
        Some(_) => Err("Jwks Oct key is an invalid Base64"),
        None => unless_unsure([k, ""], "Jwks Oct key is an invalid Base64"),
    }
}

fn okp(key: &Map<String, Value>, alg: &str) -> Result<(), &'static str> {
    if !alg.is_empty() && alg != "EdDSA" {
        return Err("[alg] is not [EdDSA] for an OKP key");
    }
    let crv = required(
        key,
        "crv",
        "[crv] field is missing for an OKP key",
        "[crv] field is not string for an OKP key",
    )?;
    if crv != "Ed25519" {
        return Err("[crv] field is not supported for an OKP key");
    }
    let x = required(
        key,
        "x",
        "[x] field is missing for an OKP key",
        "[x] field is not string for an OKP key",
    )?;
    match web_safe(x) {
        Some(bytes) if bytes.len() == 32 => Ok(()),
        Some(_) => Err("Jwks OKP [x] field is wrong length."),
        None => unless_unsure([x, ""], "Jwks OKP [x] field is an invalid Base64."),
    }
}

/// `absl::WebSafeBase64Unescape` where it is known: the URL-safe alphabet, padding optional
/// but right when given, bits left over not judged. `None`: not base64 of that kind.
fn web_safe(text: &str) -> Option<Vec<u8>> {
    use base64::engine::{general_purpose::GeneralPurpose, DecodePaddingMode};
    use base64::Engine;
    const ENGINE: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    ENGINE.decode(text).ok()
}

/// A refusal for base64 that did not decode here, unless what is in it (white space, the
/// standard alphabet's `+` and `/`) is what absl may read otherwise: then taken.
fn unless_unsure(texts: [&str; 2], status: &'static str) -> Result<(), &'static str> {
    let unsure = texts.iter().any(|t| {
        t.chars()
            .any(|c| c.is_ascii_whitespace() || c == '+' || c == '/')
    });
    if unsure {
        Ok(())
    } else {
        Err(status)
    }
}

/// A JWKS without `keys` whose every member is a PEM certificate (`shouldCheckX509`).
fn x509_form(jwks: &Map<String, Value>) -> bool {
    !jwks.is_empty()
        && jwks.iter().all(|(kid, value)| {
            !kid.is_empty()
                && value.as_str().is_some_and(|pem| {
                    pem.starts_with("-----BEGIN CERTIFICATE-----\n")
                        && pem.ends_with("\n-----END CERTIFICATE-----\n")
                })
        })
}

/// One certificate of the X.509 form: it loads, and its key is RSA.
fn x509(pem: &str) -> Result<(), &'static str> {
    let block = Reader::new(pem.as_bytes())
        .block_for(Wanted::Certificate)
        .map_err(|_| "X509 parse pubkey fails")?;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&block.data) else {
        return Err("X509 parse pubkey fails");
    };
    let rsa = cert.public_key().algorithm.algorithm.to_id_string() == "1.2.840.113549.1.1.1";
    if rsa {
        Ok(())
    } else {
        Err("X509 parse pubkey internal fails: get pubkey")
    }
}

#[cfg(test)]
mod tests {
    use super::judge;

    #[test]
    fn the_first_key_s_error_when_no_key_is_valid() {
        assert_eq!(judge("hello"), Err("Jwks is an invalid JSON"));
        assert_eq!(judge("[]"), Err("Jwks is an invalid JSON"));
        assert_eq!(judge(r#"{"a":1}"#), Err("Jwks does not have [keys] field"));
        assert_eq!(
            judge(r#"{"keys":{}}"#),
            Err("[keys] in Jwks is not an array")
        );
        assert_eq!(
            judge(r#"{"keys":[]}"#),
            Err("Jwks doesn't have any valid public key")
        );
        assert_eq!(
            judge(r#"{"keys":[{"kty":"RSA","e":"AQAB"},{"kty":"FOO"}]}"#),
            Err("[n] field is missing for a RSA key")
        );
        // One valid key is enough.
        assert_eq!(
            judge(r#"{"keys":[{"kty":"FOO"},{"kty":"oct","k":"c2VjcmV0"}]}"#),
            Ok(())
        );
    }
}
