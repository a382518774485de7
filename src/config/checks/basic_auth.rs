//! A basic-auth filter's `users` given inline, read as Envoy 1.40 reads an htpasswd file
//! (`readHtpasswd` in `basic_auth/config.cc`): a line per user, `name:{SHA}` and 28
//! characters of base64; empty lines and lines starting with `#` skipped; nothing trimmed (a
//! line ending in `\r` has a hash a character too long).
//!
//! Owns: that verdict, in Envoy's words. Must not: judge users read on the proxy's host.

use prost_reflect::DynamicMessage;

use super::refusal::{beyond, refuse, Refusal};
use crate::config::fields::{inline_data, message as field};

/// `BasicAuth` (whose users may not be empty) or `BasicAuthPerRoute` (whose may).
pub(super) fn users(
    config: &DynamicMessage,
    at: &[String],
    per_route: bool,
) -> Result<(), Refusal> {
    let Some(bytes) = field(config, "users").and_then(|source| inline_data(&source)) else {
        return Ok(());
    };
    let judged = if bytes.is_empty() && !per_route {
        Err("DataSource cannot be empty")
    } else {
        htpasswd(&String::from_utf8_lossy(&bytes))
    };
    match judged {
        Ok(()) => Ok(()),
        Err(words) => refuse(&beyond(at, &["users"]), words.into()),
    }
}

/// Envoy's verdict on an htpasswd text, in its words.
pub fn htpasswd(text: &str) -> Result<(), &'static str> {
    let mut names = std::collections::HashSet::new();
    for line in text.split('\n') {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, hash) = line
            .split_once(':')
            .ok_or("basic auth: invalid htpasswd format, username:password is expected")?;
        if name.is_empty() || hash.is_empty() {
            return Err("basic auth: empty user name or password");
        }
        if !names.insert(name) {
            return Err("basic auth: duplicate users");
        }
        let sha = hash
            .strip_prefix("{SHA}")
            .ok_or("basic auth: unsupported htpasswd format: please use {SHA}")?;
        if sha.len() != 28 {
            return Err("basic auth: invalid htpasswd format, invalid SHA hash length");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::htpasswd;

    #[test]
    fn each_line_is_a_user_with_a_sha_hash() {
        let hash = format!("{{SHA}}{}=", "a".repeat(27));
        assert_eq!(htpasswd(&format!("# users\n\nu:{hash}\nv:{hash}")), Ok(()));
        assert_eq!(
            htpasswd(&format!("u:{hash}\r\n")),
            Err("basic auth: invalid htpasswd format, invalid SHA hash length")
        );
        assert_eq!(
            htpasswd(" # indented\n"),
            Err("basic auth: invalid htpasswd format, username:password is expected")
        );
        assert_eq!(
            htpasswd(&format!("u:{hash}\nu:{hash}\n")),
            Err("basic auth: duplicate users")
        );
        assert_eq!(
            htpasswd("u:$apr1$x\n"),
            Err("basic auth: unsupported htpasswd format: please use {SHA}")
        );
        assert_eq!(
            htpasswd(":x\n"),
            Err("basic auth: empty user name or password")
        );
    }
}
