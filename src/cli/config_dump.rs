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
    /// The node polls (REST-JSON, `Fetch*`) instead of holding a stream: what it holds is
    /// known only from its polls, each naming the version it has; what it was answered
    /// last, it takes or not unseen until its next poll.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub polls: bool,
    /// The generations the server keeps: the oldest, and how many (`serve
    /// --keep-generations`).
    #[serde(skip)]
    pub kept: Option<(u64, usize)>,
    /// By type (`CDS`, ...): what the node asked for or was sent.
    pub types: BTreeMap<String, TypeDump>,
}

/// One type of one node.
#[derive(Debug, Serialize)]
pub struct TypeDump {
    /// `SYNCED`, `STALE`, `NACKED`, ...
    pub state: String,
    /// The version the node holds: the one it ACKed last (empty: none yet).
    pub acked: String,
    /// A newer version sent and not ACKed yet, if any (of a poller: the version its last
    /// poll was answered with, which it has not polled at since).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<String>,
    /// The version this node is served now: its last response's (for a type subscribed
    /// by name, the version of the names it asked for); equal to `acked` once it holds it.
    pub served: String,
    /// The node's last NACK of this type, in its words (also under `rejected`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nack: Option<String>,
    /// What the node holds (each `name`, `version`, `resource`, as `/config_dump` gives
    /// them): the resources of `acked` when the server still keeps that version (the
    /// served ones once it holds them; for a NACKed type, what its stream knows it still
    /// runs; for an updating type, the generation it ACKed, when among those kept). For a
    /// type subscribed by name (EDS, RDS), every resource of its group of that version: it
    /// holds those it subscribes to. Of a poller that has not polled since it was answered:
    /// what it was answered (`in_flight`), which it may or may not have taken.
    pub resources: Vec<serde_json::Value>,
    /// Whether `resources` are what it holds (`false`: the version it holds is no longer
    /// kept here, and `resources` is empty).
    pub held_known: bool,
    /// For a NACKed type: the candidate it rejected, apart from what it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected: Option<Rejected>,
}

/// The response a node rejected.
#[derive(Debug, Serialize)]
pub struct Rejected {
    pub version: String,
    /// The proxy's words.
    pub error: String,
    /// What it added or changed against what the node holds (the first 20), and where each
    /// is written.
    pub changes: Vec<crate::fleet::RejectedChange>,
    /// The resources served now that it rejected (those of its group, as `/config_dump`
    /// gives them).
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
    let dumped: anyhow::Result<Found> = rt.block_on(async {
        let (status, _) = fetch_status(&target, token.as_deref()).await?;
        if let Some(node) = status
            .nodes
            .iter()
            .find(|n| n.node_id == args.node)
            .cloned()
        {
            return Ok(Found::Here(node_dump(
                node,
                &node_config(&target, token.as_deref(), &args.node).await?,
            )));
        }
        // From etcd, another replica may have it: ask that one, at the address its summary
        // gives, with the same access.
        let Some((replica, addr)) = replica_with(&status, &args.node) else {
            return Ok(Found::Nowhere);
        };
        let asked = async {
            let there = resolve(&addr)?;
            let other = target.at(there);
            let (status, _) = fetch_status(&other, token.as_deref()).await?;
            let node = status
                .nodes
                .into_iter()
                .find(|n| n.node_id == args.node)
                .ok_or_else(|| anyhow::anyhow!("it no longer lists the node"))?;
            let dump = node_config(&other, token.as_deref(), &args.node).await?;
            anyhow::Ok(node_dump(node, &dump))
        };
        match asked.await {
            Ok(dump) => Ok(Found::There(replica, addr, dump)),
            Err(e) => Ok(Found::Unasked(replica, addr, e)),
        }
    });
    let dump = match dumped {
        Ok(Found::Here(dump)) => dump,
        Ok(Found::There(replica, addr, dump)) => {
            eprintln!(
                "node {} is connected to replica {} ({addr}): asked it",
                printable(&args.node),
                printable(&replica)
            );
            dump
        }
        Ok(Found::Unasked(replica, addr, e)) => {
            eprintln!(
                "error: node {} is connected to replica {}, which could not be asked ({e:#}); \
                 ask it: switchyard config-dump {} --admin-addr {addr}",
                printable(&args.node),
                printable(&replica),
                printable(&args.node),
            );
            return ExitCode::FAILURE;
        }
        Ok(Found::Nowhere) => {
            eprintln!(
                "error: node {:?} is not connected to this server, nor listed by another \
                 replica (`switchyard status` lists the nodes that are; `/config_dump?node=` \
                 shows what a node would get)",
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

/// Where the node was found.
enum Found {
    Here(NodeDump),
    /// On another replica (its name and admin address), asked.
    There(String, String, NodeDump),
    /// On another replica that could not be asked, and why.
    Unasked(String, String, anyhow::Error),
    Nowhere,
}

/// `/config_dump?node=NODE` of the admin API at `target`.
async fn node_config(
    target: &super::admin_api::AdminTarget,
    token: Option<&str>,
    node: &str,
) -> anyhow::Result<serde_json::Value> {
    let mut url = reqwest::Url::parse("http://switchyard/config_dump")?;
    url.query_pairs_mut().append_pair("node", node);
    let path = format!("/config_dump?{}", url.query().unwrap_or_default());
    let (code, body, url) = admin_call(target, token, reqwest::Method::GET, &path).await?;
    if !code.is_success() {
        anyhow::bail!("{url} answered {code}: {}", body.trim());
    }
    Ok(serde_json::from_str(&body)?)
}

/// The other replica whose summary lists `node`, and its admin address.
fn replica_with(status: &crate::admin::Status, node: &str) -> Option<(String, String)> {
    let replicas = status.replicas.as_ref()?;
    replicas
        .others()
        .find(|r| r.nodes.iter().any(|n| n.node_id == node))
        .map(|r| (r.replica.clone(), r.admin.clone()))
        .filter(|(_, admin)| !admin.is_empty())
}

/// A replica's admin address (`HOST:PORT`) as a socket address.
fn resolve(addr: &str) -> anyhow::Result<std::net::SocketAddr> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .map_err(|e| anyhow::anyhow!("cannot resolve {addr}: {e}"))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{addr} resolves to no address"))
}

/// What `node` holds per type (from `/status`: the versions it ACKed, was sent, rejected),
/// with the resources of those versions (`dump`, from `/config_dump?node=`: what it is served
/// now, and what it holds when the server still keeps an older version it ACKed).
pub fn node_dump(node: crate::admin::NodeStatus, dump: &serde_json::Value) -> NodeDump {
    use crate::fleet::SyncStatus;
    let served = dump["types"].as_object();
    let polls = !node.streams.is_empty() && node.streams.iter().all(|s| s.polls.is_some());
    let mut types = BTreeMap::new();
    for (kind, t) in &node.types {
        let now = served.and_then(|s| s.get(kind));
        let resources_of = |entry: Option<&serde_json::Value>| {
            entry
                .and_then(|n| n["resources"].as_array())
                .cloned()
                .unwrap_or_default()
        };
        let in_flight = (t.state == SyncStatus::Stale && !t.version_sent.is_empty())
            .then(|| t.version_sent.clone());
        let group_version = now
            .and_then(|n| n["version"].as_str())
            .unwrap_or_default()
            .to_string();
        // What this node is served: its last response (the version of the names it asked
        // for, for a type by name), the group's version before any.
        let served_version = match (&t.rejected_version, t.version_sent.is_empty()) {
            (Some(rejected), _) if t.state == SyncStatus::Nacked => rejected.clone(),
            (_, false) => t.version_sent.clone(),
            (_, true) => group_version.clone(),
        };
        // What it holds: the served resources once it ACKed what it was sent on the
        // generation served now; else those of the version it ACKed, if still kept.
        let on_newest = node.generation == dump["generation"].as_u64().unwrap_or(0);
        let (resources, held_known) = if t.version_acked.is_empty() {
            // A poller answered and not heard since: what it was answered, if served now.
            match polls && on_newest && in_flight.is_some() {
                true => (resources_of(now), true),
                false => (Vec::new(), true),
            }
        } else if t.state == SyncStatus::Synced && on_newest {
            (resources_of(now), true)
        } else {
            match now.and_then(|n| n.get("held")) {
                Some(held) => (resources_of(Some(held)), true),
                None if t.version_acked == group_version => (resources_of(now), true),
                None => (Vec::new(), false),
            }
        };
        let rejected = (t.state == SyncStatus::Nacked).then(|| Rejected {
            version: served_version.clone(),
            error: t.error.clone().unwrap_or_default(),
            changes: t.rejected_changes.clone(),
            resources: resources_of(now),
        });
        types.insert(
            kind.clone(),
            TypeDump {
                state: t.state.name().to_string(),
                acked: t.version_acked.clone(),
                in_flight,
                served: served_version,
                nack: t.error.clone(),
                resources,
                held_known,
                rejected,
            },
        );
    }
    NodeDump {
        schema: SCHEMA,
        node: node.node_id,
        cluster: node.node_cluster,
        generation: node.generation,
        polls,
        kept: dump["kept"]["generations"].as_u64().map(|n| {
            (
                dump["kept"]["oldest"].as_u64().unwrap_or_default(),
                usize::try_from(n).unwrap_or_default(),
            )
        }),
        types,
    }
}

/// The dump for people: per type, what the node holds (its version and resources), then
/// what is in flight or what it rejected, apart.
pub fn dump_text(dump: &NodeDump) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "node {} (cluster {}), generation {}",
        printable(&dump.node),
        printable(&dump.cluster),
        dump.generation
    );
    let resource_lines = |out: &mut String, resources: &[serde_json::Value]| {
        for r in resources {
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
    };
    if dump.polls {
        let _ = writeln!(
            out,
            "it polls (REST-JSON or Fetch): what it holds is what its polls say; what it was \
             answered last it takes unseen, until it polls again at that version"
        );
    }
    for (kind, t) in &dump.types {
        let holds = if t.acked.is_empty() && dump.polls {
            match &t.in_flight {
                Some(answered) => format!(
                    "was answered version {} (a poller cannot confirm it took it: it has not \
                     polled again since)",
                    printable(answered)
                ),
                None => "holds nothing of it yet".to_string(),
            }
        } else if t.acked.is_empty() {
            "holds nothing of it yet (nothing ACKed)".to_string()
        } else if t.acked == t.served {
            format!("holds version {}, what it is served", printable(&t.acked))
        } else if t.rejected.is_some() {
            format!("still runs version {} (its last ACK)", printable(&t.acked))
        } else {
            format!("holds version {}", printable(&t.acked))
        };
        let _ = write!(out, "\n{kind} {}: {holds}", t.state);
        if let Some(sent) = t
            .in_flight
            .as_ref()
            .filter(|_| !(dump.polls && t.acked.is_empty()))
        {
            let _ = write!(out, "; in flight: {}", printable(sent));
        }
        out.push('\n');
        if t.acked.is_empty() && dump.polls && !t.resources.is_empty() {
            let _ = writeln!(out, "  {} resource(s) it was answered:", t.resources.len());
            resource_lines(&mut out, &t.resources);
        }
        if !t.acked.is_empty() {
            if t.held_known {
                let _ = writeln!(out, "  {} resource(s) it holds:", t.resources.len());
                resource_lines(&mut out, &t.resources);
            } else {
                let _ = writeln!(
                    out,
                    "  its resources of version {}: no longer kept here ({}; `serve \
                     --keep-generations` keeps more)",
                    printable(&t.acked),
                    match dump.kept {
                        Some((oldest, n)) => format!(
                            "the server keeps the last {n} generations, from generation {oldest}"
                        ),
                        None => "older than the generations the server keeps".to_string(),
                    }
                );
            }
        }
        if let Some(r) = &t.rejected {
            let _ = writeln!(
                out,
                "  REJECTED version {}: {}",
                printable(&r.version),
                printable(&r.error)
            );
            for c in &r.changes {
                let _ = writeln!(
                    out,
                    "    {} {}",
                    printable(&c.change),
                    printable(&c.resource)
                );
            }
            let _ = writeln!(out, "  {} resource(s) it rejected:", r.resources.len());
            resource_lines(&mut out, &r.resources);
        } else if let Some(sent) = &t.in_flight {
            let _ = match dump.polls {
                true if t.acked.is_empty() => Ok(()),
                true => writeln!(
                    out,
                    "  version {} answered, not polled at yet: it holds the above until it is",
                    printable(sent)
                ),
                false => writeln!(
                    out,
                    "  version {} sent, not ACKed yet: it holds the above until it does",
                    printable(sent)
                ),
            };
        }
    }
    out
}
