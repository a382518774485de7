//! The checks on their own; tests/checks_envoy.rs holds each against the real Envoy.

use super::*;

#[test]
fn re2s_syntax_in_re2s_words() {
    let mut wrong = Vec::new();
    for (pattern, expected) in [
        ("a", Ok(())),
        ("^/api/v[0-9]+/.*$", Ok(())),
        ("\\Qa.b\\E", Ok(())),
        ("\\C", Ok(())),
        ("a{,3}", Ok(())),
        ("(?P<n>a)(?<m>b)", Ok(())),
        ("[[:alpha:]]", Ok(())),
        ("*", Err("no argument for repetition operator: *")),
        ("+a", Err("no argument for repetition operator: +")),
        ("a**", Err("bad repetition operator: **")),
        ("a{2}{3}", Err("bad repetition operator: {2}{3}")),
        ("(a", Err("missing ): (a")),
        ("a)", Err("unexpected ): a)")),
        ("[a", Err("missing ]: [a")),
        ("[z-a]", Err("invalid character class range: z-a")),
        ("\\q", Err("invalid escape sequence: \\q")),
        ("\\1", Err("invalid escape sequence: \\1")),
        ("a{1001}", Err("invalid repetition size: {1001}")),
        ("x{2,1}", Err("invalid repetition size: {2,1}")),
        ("(?x)a", Err("invalid perl operator: (?x")),
        ("(?=a)", Err("invalid perl operator: (?=")),
        ("[[:foo:]]", Err("invalid character class range: [:foo:]")),
    ] {
        let got = regex::check(pattern);
        if got != expected.map_err(str::to_string) {
            wrong.push(format!("{pattern}: {got:?}, expected {expected:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_cipher_entry_is_judged_by_what_it_selects() {
    assert!(cipher_entry("ECDHE-RSA-AES128-GCM-SHA256") == Entry::Selects);
    assert!(
        cipher_entry("[ECDHE-ECDSA-AES128-GCM-SHA256|ECDHE-ECDSA-CHACHA20-POLY1305]")
            == Entry::Selects
    );
    assert!(cipher_entry("HIGH") == Entry::Selects);
    assert!(cipher_entry("ECDHE+AESGCM") == Entry::Selects);
    assert!(cipher_entry("!aRSA") == Entry::SelectsNothing);
    assert!(cipher_entry("TLS_AES_128_GCM_SHA256") == Entry::SelectsNothing);
    assert!(cipher_entry("X25519") == Entry::Unknown);
    assert!(cipher_entry("ecdhe-rsa-aes128-gcm-sha256") == Entry::Unknown);
    assert!(cipher_entry("[ECDHE-ECDSA-AES128-GCM-SHA256|NOPE-NOPE]") == Entry::Unknown);
}
