//! The client of a running server's admin API, for `status`, `rollout` and `diff --server`:
//! where it is, its token and CA, one request, and `/status` read back.
//!
//! Must not: print, or decide an exit code beyond refusing bad `--admin-*` flags.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use super::flags::{AdminAccess, AdminArgs};
use super::EXIT_USAGE;

/// Where `switchyard status` finds the admin API, and how it trusts it over HTTPS.
pub(super) struct AdminTarget {
    addr: SocketAddr,
    /// `--admin-ca`: ask over HTTPS, trusting only these CA certificates.
    ca: Option<Vec<reqwest::Certificate>>,
    /// `--admin-server-name`: the name the admin certificate carries, reached at `addr`.
    server_name: Option<String>,
}

/// The CA certificates of `--admin-ca`.
fn read_ca(path: &std::path::Path) -> anyhow::Result<Vec<reqwest::Certificate>> {
    let pem = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("cannot read the admin CA file {}: {e}", path.display()))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| anyhow::anyhow!("{} holds no PEM certificate: {e}", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!("{} holds no PEM certificate", path.display());
    }
    Ok(certs)
}

/// The admin API `args` name, and its token: or the exit code after saying why not.
pub(super) fn admin_target(args: &AdminArgs) -> Result<(AdminTarget, Option<Arc<str>>), ExitCode> {
    admin_at(args.admin_addr, &args.access)
}

/// The admin API at `addr`, and its token: or the exit code after saying why not.
pub(super) fn admin_at(
    addr: SocketAddr,
    args: &AdminAccess,
) -> Result<(AdminTarget, Option<Arc<str>>), ExitCode> {
    let usage = |e: anyhow::Error| {
        eprintln!("error: {e:#}");
        ExitCode::from(EXIT_USAGE)
    };
    let token = args.token.read().map_err(usage)?;
    let ca = args
        .admin_ca
        .as_deref()
        .map(read_ca)
        .transpose()
        .map_err(usage)?;
    let target = AdminTarget {
        addr,
        ca,
        server_name: args.admin_server_name.clone(),
    };
    Ok((target, token))
}

impl AdminTarget {
    /// The same access (CA, server name) to the admin API at `addr` instead: another
    /// replica's, as its summary names it.
    pub(super) fn at(&self, addr: SocketAddr) -> AdminTarget {
        AdminTarget {
            addr,
            ca: self.ca.clone(),
            server_name: self.server_name.clone(),
        }
    }
}

/// The longest one request to the admin API may take: above the longest the server takes to
/// answer one (15 s for a promote or abort of the fleet's rollout; up to three times
/// `--source-timeout` to settle an etcd source).
const ADMIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// One request to the admin API: its status code, body and URL.
pub(super) async fn admin_call(
    target: &AdminTarget,
    token: Option<&str>,
    method: reqwest::Method,
    path: &str,
) -> anyhow::Result<(reqwest::StatusCode, String, String)> {
    let (code, _, body, url) = admin_exchange(target, token, method, path).await?;
    Ok((code, body, url))
}

/// One request to the admin API: its status code, headers, body and URL.
async fn admin_exchange(
    target: &AdminTarget,
    token: Option<&str>,
    method: reqwest::Method,
    path: &str,
) -> anyhow::Result<(
    reqwest::StatusCode,
    reqwest::header::HeaderMap,
    String,
    String,
)> {
    let mut client = reqwest::Client::builder().timeout(ADMIN_TIMEOUT);
    let url = match (&target.ca, &target.server_name) {
        (None, _) => format!("http://{}{path}", target.addr),
        (Some(ca), name) => {
            client = client.tls_built_in_root_certs(false);
            for cert in ca {
                client = client.add_root_certificate(cert.clone());
            }
            match name {
                Some(name) => {
                    client = client.resolve(name, target.addr);
                    format!("https://{name}:{}{path}", target.addr.port())
                }
                None => format!("https://{}{path}", target.addr),
            }
        }
    };
    let mut request = client.build()?.request(method, &url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.map_err(|e| {
        let hint = match &target.ca {
            None => " (if it serves HTTPS, give --admin-ca)",
            Some(_) => "",
        };
        // The deepest cause alone (`Connection refused (os error 111)`), not the HTTP
        // library's chain of wrappers.
        let mut cause: &dyn std::error::Error = &e;
        while let Some(next) = cause.source() {
            cause = next;
        }
        let why = if e.is_timeout() {
            "it did not answer in time".to_string()
        } else {
            cause.to_string()
        };
        anyhow::anyhow!("cannot reach the admin API at {url}: {why}{hint}")
    })?;
    let code = response.status();
    let headers = response.headers().clone();
    let body = response.text().await?;
    Ok((code, headers, body, url))
}

pub(super) async fn fetch_status(
    target: &AdminTarget,
    token: Option<&str>,
) -> anyhow::Result<(crate::admin::Status, String)> {
    let (status, body, _) = fetch_status_after(target, token, None).await?;
    Ok((status, body))
}

/// `/status`, and the token of what it was made of (`x-switchyard-status`; a server
/// without the long poll sends none). With `after` (a token and how long to wait): held by
/// the server until the status differs from that token's, or the wait ends.
pub(super) async fn fetch_status_after(
    target: &AdminTarget,
    token: Option<&str>,
    after: Option<(&str, std::time::Duration)>,
) -> anyhow::Result<(crate::admin::Status, String, Option<String>)> {
    let path = match after {
        Some((after, wait)) => format!("/status?after={after}&wait={}ms", wait.as_millis()),
        None => "/status".to_string(),
    };
    let (code, headers, body, url) =
        admin_exchange(target, token, reqwest::Method::GET, &path).await?;
    if !code.is_success() {
        anyhow::bail!("{url} answered {code}: {}", body.trim());
    }
    let status = serde_json::from_str(&body)
        .map_err(|e| anyhow::anyhow!("{url} did not answer with a Switchyard status: {e}"))?;
    let changes = headers
        .get("x-switchyard-status")
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(str::to_string);
    Ok((status, body, changes))
}
