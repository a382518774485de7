//! `switchyard config-dump NODE`: the resources one connected proxy holds, as the server
//! serves them to it (redacted as the server redacts), per type, with the version it ACKed
//! and any newer one still in flight. Read from a running server's `/status` (what the node
//! ACKed, per type) and `/config_dump?node=` (the snapshot its node group gets now).
//!
//! Must not: change anything on the server.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use super::admin_api::{admin_call, admin_target, fetch_status};
use super::flags::AdminArgs;
use super::output::TextOrJson;
use super::runtime;
use super::status::printable;

#[derive(Debug, Args)]
pub struct ConfigDumpArgs {
    /// The node id of a proxy connected to the server.
    #[arg(value_name = "NODE")]
    pub node: String,
    #[command(flatten)]
    pub admin: AdminArgs,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = TextOrJson::Text)]
    pub output: TextOrJson,
}

/// The `schema` of `config-dump --output json` (docs/output.md).
pub const SCHEMA: &str = "switchyard.config_dump/v1";

/// One node's configuration, as `--output json` prints it.
#[derive(Debug, Serialize)]
pub struct NodeDump {
    /// [`SCHEMA`].
    pub schema: &'static str,
    pub node: String,
    pub cluster: String,
    /// The generation its streams have taken.
    pub generation: u64,
    /// By type (`CDS`, ...): what the node asked for or was sent.
    pub types: BTreeMap<String, TypeDump>,
}

/// One type of one node.
#[derive(Debug, Serialize)]
pub struct TypeDump {
    /// `SYNCED`, `STALE`, `NACKED`, ...
    pub state: String,
    /// The version the node ACKed last (empty: none yet).
    pub acked: String,
    /// A newer version sent and not ACKed yet, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<String>,
    /// The version the server serves this node now.
    pub served: String,
    /// The node's last NACK of this type, in its words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nack: Option<String>,
    /// The resources of `served` (each `name`, `version`, `resource`, as `/config_dump`
    /// gives them): what the node holds once `acked` is `served`.
    pub resources: Vec<serde_json::Value>,
}

/// `switchyard config-dump NODE`.
pub(super) fn run(args: &ConfigDumpArgs) -> ExitCode {
    let rt = match runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let (target, token) = match admin_target(&args.admin) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let dumped = rt.block_on(async {
        let (status, _) = fetch_status(&target, token.as_deref()).await?;
        let Some(node) = status.nodes.into_iter().find(|n| n.node_id == args.node) else {
            return Ok(None);
        };
        let mut url = reqwest::Url::parse("http://switchyard/config_dump")?;
        url.query_pairs_mut().append_pair("node", &args.node);
        let path = format!("/config_dump?{}", url.query().unwrap_or_default());
        let (code, body, url) =
            admin_call(&target, token.as_deref(), reqwest::Method::GET, &path).await?;
        if !code.is_success() {
            anyhow::bail!("{url} answered {code}: {}", body.trim());
        }
        let dump: serde_json::Value = serde_json::from_str(&body)?;
        Ok(Some(node_dump(node, &dump)))
    });
    let dump = match dumped {
        Ok(Some(dump)) => dump,
        Ok(None) => {
            eprintln!(
                "error: node {:?} is not connected to this server (`switchyard status` lists \
                 the nodes that are; `/config_dump?node=` shows what a node would get)",
                printable(&args.node)
            );
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    match args.output {
        TextOrJson::Json => match serde_json::to_string_pretty(&dump) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: cannot write the JSON: {e}");
                return ExitCode::FAILURE;
            }
        },
        TextOrJson::Text => print!("{}", dump_text(&dump)),
    }
    ExitCode::SUCCESS
}

/// What `node` ACKed per type (from `/status`), beside what its group is served now (`dump`,
/// from `/config_dump`).
pub fn node_dump(node: crate::admin::NodeStatus, dump: &serde_json::Value) -> NodeDump {
    let served = dump["types"].as_object();
    let mut types = BTreeMap::new();
    for (kind, t) in &node.types {
        let now = served.and_then(|s| s.get(kind));
        let in_flight = (t.version_sent != t.version_acked && !t.version_sent.is_empty())
            .then(|| t.version_sent.clone());
        types.insert(
            kind.clone(),
            TypeDump {
                state: t.state.name().to_string(),
                acked: t.version_acked.clone(),
                in_flight,
                served: now
                    .and_then(|n| n["version"].as_str())
                    .unwrap_or_default()
                    .to_string(),
                nack: t.error.clone(),
                resources: now
                    .and_then(|n| n["resources"].as_array())
                    .cloned()
                    .unwrap_or_default(),
            },
        );
    }
    NodeDump {
        schema: SCHEMA,
        node: node.node_id,
        cluster: node.node_cluster,
        generation: node.generation,
        types,
    }
}

/// The dump for people: per type, the versions, then each resource as indented JSON.
pub fn dump_text(dump: &NodeDump) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "node {} (cluster {}), generation {}",
        printable(&dump.node),
        printable(&dump.cluster),
        dump.generation
    );
    for (kind, t) in &dump.types {
        let acked = if t.acked.is_empty() {
            "nothing ACKed yet".to_string()
        } else if t.acked == t.served {
            format!("ACKed {} (what it is served)", printable(&t.acked))
        } else {
            format!("ACKed {}", printable(&t.acked))
        };
        let _ = write!(out, "\n{kind} {}: {acked}", t.state);
        if let Some(sent) = &t.in_flight {
            let _ = write!(out, "; in flight: {}", printable(sent));
        }
        if t.served != t.acked && t.in_flight.as_deref() != Some(t.served.as_str()) {
            let _ = write!(out, "; served now: {}", printable(&t.served));
        }
        out.push('\n');
        if let Some(nack) = &t.nack {
            let _ = writeln!(out, "  NACK: {}", printable(nack));
        }
        let what = if t.acked == t.served {
            "it holds"
        } else {
            "served now, not held yet"
        };
        let _ = writeln!(out, "  {} resource(s) {what}:", t.resources.len());
        for r in &t.resources {
            let _ = writeln!(
                out,
                "  - {} (version {})",
                printable(r["name"].as_str().unwrap_or_default()),
                printable(r["version"].as_str().unwrap_or_default())
            );
            let json = serde_json::to_string_pretty(&r["resource"]).unwrap_or_default();
            for line in json.lines() {
                let _ = writeln!(out, "      {}", printable(line));
            }
        }
    }
    out
}
