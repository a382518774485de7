//! What is secret in a resource, and the resource without it.
//!
//! Owns: which fields of the Envoy API carry secret material (every field the API marks
//! `udpa.annotations.sensitive`: private keys, session ticket keys, generic secrets, HMAC and
//! OAuth2 token secrets, ...), found in the descriptor pool rather than listed by hand, so a
//! field added to the API is covered when envoy-types is updated; and clearing them from a
//! message, including inside `Any` fields (a transport socket's `typed_config`). Names,
//! versions and certificate chains are not sensitive and stay, and so does a sensitive
//! `DataSource` that names a file or an environment variable on the proxy's host (a path is
//! not the secret; only inline bytes and strings are).
//!
//! Must not: decide who may see what (the server and the admin API do, by their flags), or
//! keep a resource's forms (`resource` does; the loader makes them with this).

use std::collections::BTreeSet;
use std::sync::OnceLock;

use prost::Message;
use prost_reflect::{DynamicMessage, ExtensionDescriptor, FieldDescriptor, Kind, Value};

use super::descriptors;

/// The field option that marks secret material.
const SENSITIVE: &str = "udpa.annotations.sensitive";

/// The full names (`package.Message.field`) of every field the API marks sensitive.
pub fn sensitive_fields() -> &'static BTreeSet<String> {
    static FIELDS: OnceLock<BTreeSet<String>> = OnceLock::new();
    FIELDS.get_or_init(|| {
        let pool = descriptors::pool();
        let Some(sensitive) = pool.get_extension_by_name(SENSITIVE) else {
            return BTreeSet::new();
        };
        pool.all_messages()
            .flat_map(|m| m.fields().collect::<Vec<_>>())
            .filter(|f| marked(f, &sensitive))
            .map(|f| f.full_name().to_string())
            .collect()
    })
}

fn marked(field: &FieldDescriptor, sensitive: &ExtensionDescriptor) -> bool {
    let options = field.options();
    options.has_extension(sensitive) && options.get_extension(sensitive).as_bool() == Some(true)
}

/// Which sensitive fields to clear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Audience {
    /// An operator (CSDS, `/config_dump`): every sensitive field.
    Operator,
    /// A proxy that has not proven who it is: private key material (private keys, PKCS#12,
    /// key passwords, session ticket keys, generic secrets, private key providers). Other
    /// sensitive fields of filter configurations (passwords, API keys, authz context) are the
    /// proxy's own configuration and go as written: clearing them would change what the
    /// proxy does, not just what it knows.
    Proxy,
}

/// The sensitive fields `audience` must not see.
fn hidden_from(audience: Audience) -> &'static BTreeSet<String> {
    static PROXY: OnceLock<BTreeSet<String>> = OnceLock::new();
    match audience {
        Audience::Operator => sensitive_fields(),
        Audience::Proxy => PROXY.get_or_init(|| {
            sensitive_fields()
                .iter()
                .filter(|f| {
                    f.starts_with("envoy.extensions.transport_sockets.tls.v3.")
                        || f.ends_with(".private_key")
                })
                .cloned()
                .collect()
        }),
    }
}

/// Clear every field of `message` that `audience` must not see, at any depth (sub-messages,
/// lists, maps, and the payload of `google.protobuf.Any` fields whose type the pool knows).
/// Returns whether anything was cleared.
pub fn redact(message: &mut DynamicMessage, audience: Audience) -> bool {
    let fields = hidden_from(audience);
    if fields.is_empty() {
        return false;
    }
    redact_in(message, fields)
}

fn redact_in(message: &mut DynamicMessage, sensitive: &BTreeSet<String>) -> bool {
    if prost_reflect::ReflectMessage::descriptor(&*message).full_name() == "google.protobuf.Any" {
        return redact_any(message, sensitive);
    }
    let mut cleared = false;
    let set: Vec<FieldDescriptor> = message.fields().map(|(f, _)| f).collect();
    for field in set {
        if sensitive.contains(field.full_name()) {
            if holds_material(&message.get_field(&field)) {
                message.clear_field(&field);
                cleared = true;
            }
            continue;
        }
        if !matches!(field.kind(), Kind::Message(_)) {
            continue;
        }
        let value = message.get_field_mut(&field);
        cleared |= redact_value(value, sensitive);
    }
    cleared
}

/// The message that names where a secret is, or holds it.
const DATA_SOURCE: &str = "envoy.config.core.v3.DataSource";

/// Whether a sensitive field's value holds secret material. A `DataSource` that names a file
/// or an environment variable on the proxy's host holds none: it is a path, which Envoy
/// reads there (and shows in its own config dump), so it goes as written; inline bytes or a
/// string are the material itself. Anything else sensitive counts as material.
fn holds_material(value: &Value) -> bool {
    match value {
        Value::Message(m)
            if prost_reflect::ReflectMessage::descriptor(m).full_name() == DATA_SOURCE =>
        {
            ["inline_bytes", "inline_string"]
                .iter()
                .any(|name| m.has_field_by_name(name))
        }
        Value::List(items) => items.iter().any(holds_material),
        Value::Map(entries) => entries.values().any(holds_material),
        _ => true,
    }
}

fn redact_value(value: &mut Value, sensitive: &BTreeSet<String>) -> bool {
    match value {
        Value::Message(m) => redact_in(m, sensitive),
        Value::List(items) => items
            .iter_mut()
            .fold(false, |acc, v| redact_value(v, sensitive) | acc),
        Value::Map(entries) => entries
            .values_mut()
            .fold(false, |acc, v| redact_value(v, sensitive) | acc),
        _ => false,
    }
}

/// An `Any`: decode its payload by its type URL, redact it, and encode it back if anything
/// was cleared. A type the pool does not know is left as is (it cannot be inspected).
fn redact_any(any: &mut DynamicMessage, sensitive: &BTreeSet<String>) -> bool {
    let type_url = any
        .get_field_by_name("type_url")
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let Some(name) = type_url.rsplit('/').next() else {
        return false;
    };
    let Some(descriptor) = descriptors::message_named(name) else {
        return false;
    };
    let bytes = any
        .get_field_by_name("value")
        .and_then(|v| v.as_bytes().cloned())
        .unwrap_or_default();
    let Ok(mut inner) = DynamicMessage::decode(descriptor, bytes) else {
        return false;
    };
    if !redact_in(&mut inner, sensitive) {
        return false;
    }
    any.set_field_by_name("value", Value::Bytes(inner.encode_to_vec().into()));
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::ResourceType;

    /// Every secret-bearing field of Envoy 1.40's API (the pool). When the API
    /// grows this list changes and this test fails: read the new fields, check they are
    /// secrets, and update the list (redaction itself already covers them).
    #[test]
    fn every_sensitive_field_of_the_api_is_known() {
        let found: Vec<&str> = sensitive_fields().iter().map(String::as_str).collect();
        let expected = [
        "envoy.config.core.v3.GrpcService.GoogleGrpc.SslCredentials.private_key",
        "envoy.config.grpc_credential.v3.FileBasedMetadataConfig.secret_data",
        "envoy.config.trace.v3.ClientConfig.backend_token",
        "envoy.extensions.common.aws.v3.AssumeRoleWithWebIdentityCredentialProvider.web_identity_token_data_source",
        "envoy.extensions.common.aws.v3.CredentialsFileCredentialProvider.credentials_data_source",
        "envoy.extensions.common.aws.v3.IAMRolesAnywhereCredentialProvider.private_key",
        "envoy.extensions.common.aws.v3.InlineCredentialProvider.secret_access_key",
        "envoy.extensions.common.aws.v3.InlineCredentialProvider.session_token",
        "envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth.credentials",
        "envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuthPerRoute.credentials",
        "envoy.extensions.filters.http.basic_auth.v3.BasicAuth.users",
        "envoy.extensions.filters.http.basic_auth.v3.BasicAuthPerRoute.users",
        "envoy.extensions.filters.http.ext_authz.v3.CheckSettings.context_extensions",
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions.Credential.auth_password",
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions.Credential.auth_username",
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions.auth_password",
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions.auth_username",
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProxy.downstream_auth_password",
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProxy.downstream_auth_passwords",
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProxy.downstream_auth_username",
        "envoy.extensions.transport_sockets.tls.v3.GenericSecret.secret",
        "envoy.extensions.transport_sockets.tls.v3.GenericSecret.secrets",
        "envoy.extensions.transport_sockets.tls.v3.PrivateKeyProvider.typed_config",
        "envoy.extensions.transport_sockets.tls.v3.TlsCertificate.password",
        "envoy.extensions.transport_sockets.tls.v3.TlsCertificate.pkcs12",
        "envoy.extensions.transport_sockets.tls.v3.TlsCertificate.private_key",
        "envoy.extensions.transport_sockets.tls.v3.TlsSessionTicketKeys.keys",
        ];
        assert_eq!(found, expected);
    }

    fn decode(kind: ResourceType, yaml: &str) -> DynamicMessage {
        let value: serde_yaml::Value = serde_yaml::from_str(yaml).expect("yaml");
        DynamicMessage::deserialize(descriptors::message(kind), value).expect("decodes")
    }

    #[test]
    fn a_tls_secret_keeps_its_chain_and_loses_its_key() {
        let mut secret = decode(
            ResourceType::Secret,
            r#"
name: server-cert
tls_certificate:
  certificate_chain: { inline_string: "-----BEGIN CERTIFICATE-----" }
  private_key: { inline_string: "-----BEGIN PRIVATE KEY-----" }
"#,
        );
        assert!(redact(&mut secret, Audience::Proxy));
        let json = serde_json::to_string(&secret).expect("json");
        assert!(
            json.contains("BEGIN CERTIFICATE") && json.contains("server-cert"),
            "{json}"
        );
        assert!(!json.contains("PRIVATE KEY"), "{json}");
        let mut generic = decode(
            ResourceType::Secret,
            "name: token\ngeneric_secret: { secret: { inline_string: hush } }\n",
        );
        assert!(redact(&mut generic, Audience::Proxy));
        assert!(!serde_json::to_string(&generic)
            .expect("json")
            .contains("hush"));
    }

    /// A key named by a path (or an environment variable) on the proxy's host is
    /// not key material: it goes as written to proxies and operators alike, in a secret and
    /// inside a listener's transport socket; beside inline material it still goes.
    #[test]
    fn a_key_named_by_a_path_on_the_proxy_s_host_stays_for_every_audience() {
        for audience in [Audience::Proxy, Audience::Operator] {
            let mut secret = decode(
                ResourceType::Secret,
                r#"
name: edge
tls_certificate:
  certificate_chain: { filename: /etc/envoy/tls.crt }
  private_key: { filename: /etc/envoy/tls.key }
  password: { environment_variable: KEY_PASSWORD }
"#,
            );
            assert!(!redact(&mut secret, audience), "{audience:?}");
            let json = serde_json::to_string(&secret).expect("json");
            assert!(
                json.contains("/etc/envoy/tls.key") && json.contains("KEY_PASSWORD"),
                "{audience:?}: {json}"
            );
            let mut listener = decode(
                ResourceType::Listener,
                r#"
name: https
address: { socket_address: { address: 0.0.0.0, port_value: 443 } }
filter_chains:
  - filters: []
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
        common_tls_context:
          tls_certificates:
            - certificate_chain: { filename: /etc/envoy/tls.crt }
              private_key: { filename: /etc/envoy/tls.key }
            - certificate_chain: { inline_string: "chain" }
              private_key: { inline_string: "the-key" }
"#,
            );
            assert!(redact(&mut listener, audience), "{audience:?}");
            let json = serde_json::to_string(&listener).expect("json");
            assert!(json.contains("/etc/envoy/tls.key"), "{audience:?}: {json}");
            assert!(!json.contains("the-key"), "{audience:?}: {json}");
        }
        // Session ticket keys: a list with one inline key goes whole; files alone stay.
        let mut keys = decode(
            ResourceType::Secret,
            "name: t\nsession_ticket_keys: { keys: [{ filename: /k1 }, { inline_bytes: AAAA }] }\n",
        );
        assert!(redact(&mut keys, Audience::Proxy));
        assert!(!serde_json::to_string(&keys).expect("json").contains("/k1"));
        let mut files = decode(
            ResourceType::Secret,
            "name: t\nsession_ticket_keys: { keys: [{ filename: /k1 }, { filename: /k2 }] }\n",
        );
        assert!(!redact(&mut files, Audience::Proxy));
    }

    #[test]
    fn a_key_inside_a_transport_socket_any_is_cleared_and_nothing_else_changes() {
        let mut cluster = decode(
            ResourceType::Cluster,
            r#"
name: tls
connect_timeout: 1s
transport_socket:
  name: envoy.transport_sockets.tls
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
    sni: backend.example.com
    common_tls_context:
      tls_certificates:
        - certificate_chain: { inline_string: "chain" }
          private_key: { inline_string: "the-key" }
"#,
        );
        let before = serde_json::to_string(&cluster).expect("json");
        assert!(before.contains("the-key"));
        assert!(redact(&mut cluster, Audience::Proxy));
        let after = serde_json::to_string(&cluster).expect("json");
        assert!(!after.contains("the-key"), "{after}");
        assert!(
            after.contains("backend.example.com") && after.contains("chain"),
            "{after}"
        );
        let mut plain = decode(ResourceType::Cluster, "name: plain\nconnect_timeout: 1s\n");
        assert!(
            !redact(&mut plain, Audience::Operator),
            "nothing secret, nothing cleared"
        );
    }

    #[test]
    fn proxies_keep_their_filter_credentials_operators_do_not_see_them() {
        let listener = r#"
name: redis
address: { socket_address: { address: 127.0.0.1, port_value: 6379 } }
filter_chains:
  - filters:
      - name: envoy.filters.network.redis_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
          stat_prefix: redis
          settings: { op_timeout: 1s }
          prefix_routes: { catch_all_route: { cluster: redis } }
          downstream_auth_passwords: [{ inline_string: "s3cret" }]
"#;
        let mut for_proxy = decode(ResourceType::Listener, listener);
        assert!(!redact(&mut for_proxy, Audience::Proxy));
        let mut for_operator = decode(ResourceType::Listener, listener);
        assert!(redact(&mut for_operator, Audience::Operator));
        let shown = serde_json::to_string(&for_operator).expect("json");
        assert!(
            !shown.contains("s3cret") && shown.contains("redis"),
            "{shown}"
        );
    }
}
