//! The flag groups several subcommands take, each defined once: the snapshot files and how
//! they are checked, custom descriptor sets, and how a client reaches a running server's
//! admin API (its address, token and TLS trust).
//!
//! Must not: act on a flag (each command does, with its own module).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use crate::config::LoadOptions;

/// The admin server's default address.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:19000";

/// How `switchyard status` and `switchyard rollout` reach a running server's admin API.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// The running server's admin address (or the environment's SWITCHYARD_ADMIN_ADDR, so a
    /// shell or a CI job names it once).
    #[arg(
        long,
        value_name = "ADDR",
        env = "SWITCHYARD_ADMIN_ADDR",
        default_value = DEFAULT_ADMIN_ADDR
    )]
    pub admin_addr: SocketAddr,
    #[command(flatten)]
    pub access: AdminAccess,
}

/// The admin API's token and TLS trust.
#[derive(Debug, Args)]
pub struct AdminAccess {
    #[command(flatten)]
    pub token: AdminToken,
    /// Ask over HTTPS (the server's --admin-tls-cert), trusting this CA certificate (PEM).
    #[arg(long, value_name = "PATH")]
    pub admin_ca: Option<PathBuf>,
    /// With --admin-ca: the name the admin certificate must carry (a DNS name), when it is
    /// not the IP address of --admin-addr.
    #[arg(long, value_name = "NAME", requires = "admin_ca")]
    pub admin_server_name: Option<String>,
}

/// The snapshot files and how they are checked (`serve`, `validate`).
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// A snapshot file, or a directory whose *.yaml, *.yml and *.json files (at any depth,
    /// hidden entries skipped) are read. Repeatable. Required, but for `validate --source`.
    #[arg(long = "config", short = 'c', value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Treat reference problems (a route naming a missing cluster, ...) as errors.
    #[arg(long)]
    pub strict: bool,
    /// Do not check Envoy's own field rules at load: only for clients that do not apply them
    /// (proxyless gRPC) with resources Envoy would reject, such as a listener without
    /// `stat_prefix`.
    #[arg(long)]
    pub skip_envoy_rules: bool,
    /// An xdstp authority this server answers for (P35), as in
    /// `xdstp://AUTHORITY/TYPE/ID`. Repeatable. A resource named for another authority is a
    /// load error, and a request naming one is answered as not existing. None given: any.
    #[arg(long = "authority", value_name = "NAME")]
    pub authorities: Vec<String>,
    /// The RE2 program size a regex may have where no RTDS runtime in the files sets
    /// `re2.max_program_size.error_level`: what the proxies' bootstraps set in a static
    /// layer, when they raise Envoy's default.
    #[arg(long, value_name = "N", default_value_t = crate::config::checks::re2::DEFAULT_MAX_PROGRAM_SIZE)]
    pub re2_max_program_size: u64,
    #[command(flatten)]
    pub descriptors: DescriptorArgs,
}

impl ConfigArgs {
    /// The load options these flags decide (the rest as by default).
    pub(super) fn load_options(&self) -> LoadOptions {
        LoadOptions {
            strict: self.strict,
            envoy_rules: !self.skip_envoy_rules,
            authorities: self.authorities.clone(),
            re2_max_program_size: self.re2_max_program_size,
            ..LoadOptions::default()
        }
    }
}

/// Descriptors beyond Envoy's API: custom and contrib extensions.
#[derive(Debug, Args, Default)]
pub struct DescriptorArgs {
    /// A FileDescriptorSet (`protoc --include_imports --descriptor_set_out=FILE ...`) whose
    /// messages may be used in any `Any` (`typed_config` of a custom or contrib filter),
    /// checked with their field rules like Envoy's own. Repeatable.
    #[arg(long = "descriptor-set", value_name = "FILE")]
    pub sets: Vec<PathBuf>,
}

/// The admin API's bearer token: what `serve` requires and the clients send.
#[derive(Debug, Args, Default)]
pub struct AdminToken {
    /// A file holding the admin API's bearer token. Under `serve`, the admin API's `/`,
    /// `/status` and `/config_dump` then require it (`Authorization: Bearer <token>`);
    /// `/healthz`, `/readyz` and `/metrics` stay open: use it whenever --admin-addr is not
    /// loopback. Under `status`, `rollout` and `diff --server`: the running server's
    /// --admin-token-file, sent with each request.
    #[arg(long, value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,
}

impl AdminToken {
    /// The token, when a file is given.
    pub(super) fn read(&self) -> anyhow::Result<Option<Arc<str>>> {
        self.admin_token_file.as_deref().map(read_token).transpose()
    }
}

/// The token in a token file: its text without surrounding white space, never empty.
fn read_token(path: &std::path::Path) -> anyhow::Result<Arc<str>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read the admin token file {}: {e}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        anyhow::bail!("the admin token file {} is empty", path.display());
    }
    Ok(token.into())
}

/// How to reach etcd (`--source etcd://...`) beyond its URL: TLS and a user, as etcd's own
/// clients take them (etcdctl's --cacert, --cert, --key, --user).
#[derive(Debug, Args, Default, Clone)]
pub struct EtcdArgs {
    /// Reach etcd over TLS, trusting this CA certificate (PEM) for the members'.
    #[arg(long, value_name = "PATH")]
    pub etcd_ca: Option<PathBuf>,
    /// With --etcd-ca: present this client certificate (PEM) to etcd (its
    /// --client-cert-auth).
    #[arg(long, value_name = "PATH", requires_all = ["etcd_ca", "etcd_key"])]
    pub etcd_cert: Option<PathBuf>,
    /// The key of --etcd-cert (PEM).
    #[arg(long, value_name = "PATH", requires = "etcd_cert")]
    pub etcd_key: Option<PathBuf>,
    /// Authenticate as this etcd user (etcd's auth), with the password in
    /// --etcd-password-file (never on the command line).
    #[arg(long, value_name = "NAME", requires = "etcd_password_file")]
    pub etcd_user: Option<String>,
    /// The file holding --etcd-user's password (trailing newline ignored).
    #[arg(long, value_name = "PATH", requires = "etcd_user")]
    pub etcd_password_file: Option<PathBuf>,
}

/// A file a flag names that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("--{flag} {}: cannot read: {source}", path.display())]
pub struct FlagFileError {
    pub flag: &'static str,
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl EtcdArgs {
    /// The access these flags describe, their files read; or what cannot be read.
    pub fn access(&self) -> Result<crate::source::etcd::Access, FlagFileError> {
        let read = |flag: &'static str, path: &PathBuf| {
            std::fs::read_to_string(path).map_err(|source| FlagFileError {
                flag,
                path: path.clone(),
                source,
            })
        };
        let tls = match &self.etcd_ca {
            None => None,
            Some(ca) => {
                let identity = match (&self.etcd_cert, &self.etcd_key) {
                    (Some(cert), Some(key)) => {
                        Some((read("etcd-cert", cert)?, read("etcd-key", key)?))
                    }
                    _ => None,
                };
                Some((read("etcd-ca", ca)?, identity))
            }
        };
        let user = match (&self.etcd_user, &self.etcd_password_file) {
            (Some(name), Some(file)) => {
                let password = read("etcd-password-file", file)?;
                Some((
                    name.clone(),
                    password.trim_end_matches(['\n', '\r']).to_string(),
                ))
            }
            _ => None,
        };
        Ok(crate::source::etcd::Access { tls, user })
    }
}
