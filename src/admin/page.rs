//! `GET /`: the fleet at a glance, for a person on call. Server-rendered HTML with inline CSS,
//! no JavaScript and no external assets; it reloads itself every [`REFRESH_SECONDS`]. A
//! headline first (green, amber or red: where the fleet stands, and the next step with the
//! command to run), with the time it is as of and the source's position; then summary
//! counts, then a table of nodes filtered and
//! paged on the server (`?q=` matches node id or cluster, `?state=` keeps nodes with a type in
//! that state, `?page=`), so it stays usable at 10,000 nodes. Nodes with a problem come first
//! (NACKED, then STALE), then by node id in natural order (`edge-2` before `edge-10`); each
//! summary count links to the filter that lists its nodes.
//!
//! Must not: read the fleet or the cache itself (it renders the [`Status`] it is given, the
//! same as `/status`), or change anything.

use std::fmt::Write;

use serde::Deserialize;

use super::{NodeStatus, Status};
use crate::fleet::SyncStatus;
use crate::resource::ResourceType;

/// Rows per page.
pub const PAGE_SIZE: usize = 100;

/// How often the page reloads itself (a `<meta http-equiv="refresh">`: no JavaScript).
pub const REFRESH_SECONDS: u32 = 10;

/// The page's query.
#[derive(Debug, Default, Deserialize)]
pub struct PageQuery {
    /// Substring of node id or cluster.
    #[serde(default)]
    pub q: String,
    /// `SYNCED`, `STALE`, `NACKED` or `NOT_SENT`: nodes with some type in that state;
    /// `ALL_SYNCED`: every type synced; `UPDATING`: a make-before-break update in progress.
    #[serde(default)]
    pub state: String,
    /// 1-based.
    #[serde(default)]
    pub page: Option<usize>,
}

/// Escape text for HTML content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A URL query value, percent-encoded (the page's own links, `switchyard diff --server`).
pub(crate) fn query_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

fn matches(listed: &Listed<'_>, query: &PageQuery) -> bool {
    let node: &NodeStatus = &listed.node;
    let q = query.q.trim().to_lowercase();
    (q.is_empty()
        || node.node_id.to_lowercase().contains(&q)
        || node.node_cluster.to_lowercase().contains(&q)
        || listed
            .replica
            .is_some_and(|r| r.to_lowercase().contains(&q)))
        && match query.state.as_str() {
            "" => true,
            "ALL_SYNCED" => all_synced(node),
            "UPDATING" => updating(node),
            state => SyncStatus::from_name(state)
                .is_some_and(|state| node.types.values().any(|t| t.state == state)),
        }
}

fn all_synced(node: &NodeStatus) -> bool {
    node.types.values().all(|t| t.state == SyncStatus::Synced)
}

fn updating(node: &NodeStatus) -> bool {
    node.streams.iter().any(|s| s.plan.is_some())
}

/// Where a node is listed: NACKing first, then with a response not yet ACKed, then the rest.
fn problem_rank(node: &NodeStatus) -> u8 {
    if node.types.values().any(|t| t.state == SyncStatus::Nacked) {
        0
    } else if node.types.values().any(|t| t.state == SyncStatus::Stale) {
        1
    } else {
        2
    }
}

/// Natural order: runs of digits compare as numbers (`edge-2` < `edge-10`), the rest as text.
fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    let run = |s: &[u8], digits: bool| {
        s.iter()
            .position(|c| c.is_ascii_digit() != digits)
            .unwrap_or(s.len())
    };
    while !a.is_empty() && !b.is_empty() {
        let digits = a[0].is_ascii_digit();
        if digits != b[0].is_ascii_digit() {
            return a[0].cmp(&b[0]);
        }
        let (ra, rb) = (run(a, digits), run(b, digits));
        let (pa, pb) = (&a[..ra], &b[..rb]);
        let order = if digits {
            let (ta, tb) = (trim_zeros(pa), trim_zeros(pb));
            ta.len()
                .cmp(&tb.len())
                .then(ta.cmp(tb))
                .then(pa.len().cmp(&pb.len()))
        } else {
            pa.cmp(pb)
        };
        if order != Ordering::Equal {
            return order;
        }
        (a, b) = (&a[ra..], &b[rb..]);
    }
    a.len().cmp(&b.len())
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let start = digits
        .iter()
        .position(|&c| c != b'0')
        .unwrap_or(digits.len());
    &digits[start..]
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse}td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:left}\
.SYNCED{background:#d4f4d4}.STALE{background:#fff2b3}.NACKED{background:#f8c6c6}\
.NOT_SENT{background:#eee}.err{color:#a00;font-size:12px}.sum span{margin-right:1.5em}\
.bad{color:#a00}.ok{color:#070}.wait{color:#864}.stale{color:#777;font-style:italic}\
.head{padding:8px 12px;border-radius:4px;font-size:16px}.head.good{background:#d4f4d4;color:#063}\
.head.wait{background:#fff2b3;color:#640}.head.act{background:#f8c6c6;color:#800}\
.asof{color:#555;font-size:12px}";

/// Render the page.
pub fn render(status: &Status, query: &PageQuery) -> String {
    let listed = listed(status);
    let kinds: Vec<&str> = ResourceType::ALL
        .iter()
        .map(|k| k.short_name())
        .filter(|k| listed.iter().any(|l| l.node.types.contains_key(*k)))
        .collect();
    let mut html = String::new();
    let _ = write!(
        html,
        "<!doctype html><html><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\"><title>Switchyard</title>\
         <style>{STYLE}</style></head><body><h1>Switchyard</h1>"
    );
    headline(&mut html, status);
    summary(&mut html, status, &listed);
    config(&mut html, status);
    rollouts(&mut html, status);
    replicas(&mut html, status);
    notices(&mut html, status);
    html.push_str(
        "<p><a href=\"/status\">/status</a> · <a href=\"/metrics\">/metrics</a> · \
         <a href=\"/healthz\">/healthz</a> · <a href=\"/readyz\">/readyz</a></p>",
    );
    filter_form(&mut html, query);
    nodes_table(&mut html, status, &listed, query, &kinds);
    history(&mut html, &status.history);
    html.push_str("</body></html>\n");
    html
}

/// Where the fleet stands, coloured by who has to act, with the next step; and what the
/// page is as of: its time and the source's position.
fn headline(html: &mut String, status: &Status) {
    use super::standing::{verdict, Severity};
    let standing = verdict(status);
    let class = match standing.severity() {
        Severity::Good => "good",
        Severity::Wait => "wait",
        Severity::Act => "act",
    };
    let _ = write!(
        html,
        "<p class=\"head {class}\" id=\"headline\"><b>{}</b>. Next: {}.</p>",
        esc(&capitalized(standing.text())),
        next_step_html(standing.next_step())
    );
    let position = match status.config.as_ref() {
        Some(c) => match (c.revision, c.read) {
            (Some(revision), _) => format!("; source at etcd revision {revision}"),
            (None, Some(read)) => format!("; source at read {read} of the files"),
            (None, None) => String::new(),
        },
        None => String::new(),
    };
    let version = super::replicas::version_of(status, status.generation);
    let version = super::view::short(&version);
    let (running, proxies) = fleet_synced(status);
    let _ = write!(
        html,
        "<p class=\"asof\">As of {}{position}; the newest generation here is {}{}: {running} \
         of {proxies} proxies run it with every type synced. This page reloads every \
         {REFRESH_SECONDS} s.</p>",
        esc(&status.at),
        status.generation,
        if version.is_empty() {
            String::new()
        } else {
            format!(" (version {})", esc(version))
        },
    );
}

/// How many proxies of the fleet run what their replica serves with every type synced, of
/// how many: this replica's, and every other replica's as its summary counts them.
fn fleet_synced(status: &Status) -> (usize, usize) {
    let here = status
        .nodes
        .iter()
        .filter(|n| n.generation == status.generation && all_synced_or_unsent(n))
        .count();
    let others = status.replicas.iter().flat_map(|r| r.others());
    others.fold((here, status.nodes.len()), |(synced, all), r| {
        (synced + r.synced, all + r.proxies)
    })
}

fn all_synced_or_unsent(node: &NodeStatus) -> bool {
    node.types
        .values()
        .all(|t| matches!(t.state, SyncStatus::Synced | SyncStatus::NotSent))
}

/// `text` with its first letter upper-case.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A next step's text, its `commands` in `<code>`.
fn next_step_html(text: &str) -> String {
    esc(text)
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("<code>{part}</code>")
            } else {
                part.to_string()
            }
        })
        .collect()
}

/// The counts at the top, each a link to the nodes it counts: over the whole fleet (from
/// etcd, every replica's summary counts its own proxies, and lists those with a problem
/// first as far as it fits).
fn summary(html: &mut String, status: &Status, listed: &[Listed<'_>]) {
    let count = |state: SyncStatus| {
        listed
            .iter()
            .filter(|l| l.node.types.values().any(|t| t.state == state))
            .count()
    };
    let others: Vec<&super::replicas::ReplicaSummary> =
        status.replicas.iter().flat_map(|r| r.others()).collect();
    let proxies = status.nodes.len() + others.iter().map(|r| r.proxies).sum::<usize>();
    let nacking = status
        .nodes
        .iter()
        .filter(|n| n.types.values().any(|t| t.state == SyncStatus::Nacked))
        .count()
        + others.iter().map(|r| r.nacked).sum::<usize>();
    let (synced, _) = fleet_synced(status);
    let where_ = if others.is_empty() {
        String::new()
    } else {
        format!(" on {} replicas", others.len() + 1)
    };
    let _ = write!(
        html,
        "<p class=\"sum\"><span><a href=\"/\"><b>{proxies}</b> nodes{where_}</a></span>\
         <span class=\"bad\"><a href=\"/?state=NACKED\"><b>{nacking}</b> NACKing</a></span>\
         <span><a href=\"/?state=STALE\"><b>{}</b> with a response not yet ACKed</a></span>\
         <span><a href=\"/?state=UPDATING\"><b>{}</b> mid-update (make-before-break)</a></span>\
         <span><a href=\"/?state=ALL_SYNCED\"><b>{synced}</b> with every type SYNCED</a></span></p>",
        count(SyncStatus::Stale),
        listed.iter().filter(|l| updating(&l.node)).count(),
    );
    let unlisted: usize = others.iter().map(|r| r.omitted).sum();
    if unlisted > 0 {
        let _ = write!(
            html,
            "<p class=\"asof\">{unlisted} synced proxies of other replicas are counted, not \
             listed: their summaries list those with a problem first, as far as they fit.</p>"
        );
    }
}

/// A proxy as the page lists it: this replica's own (with its streams and agent), or one
/// another replica's summary lists (`replica` names that replica).
struct Listed<'a> {
    replica: Option<&'a str>,
    node: std::borrow::Cow<'a, NodeStatus>,
    /// The content version of the generation it runs (empty when not known).
    version: String,
}

/// Every proxy of the fleet the page knows of: this replica's, then those the other
/// replicas' summaries list.
fn listed(status: &Status) -> Vec<Listed<'_>> {
    let mut out: Vec<Listed<'_>> = status
        .nodes
        .iter()
        .map(|n| Listed {
            replica: None,
            node: std::borrow::Cow::Borrowed(n),
            version: super::replicas::version_of(status, n.generation),
        })
        .collect();
    for r in status.replicas.iter().flat_map(|r| r.others()) {
        for n in &r.nodes {
            out.push(Listed {
                replica: Some(&r.replica),
                node: std::borrow::Cow::Owned(from_summary(n)),
                version: n.version.clone(),
            });
        }
    }
    out
}

/// Another replica's proxy as a node's row shows it: what its summary says (no streams or
/// agent: those are on its replica's page).
fn from_summary(n: &super::replicas::NodeSummary) -> NodeStatus {
    NodeStatus {
        node_id: n.node_id.clone(),
        node_cluster: n.node_cluster.clone(),
        user_agent: String::new(),
        user_agent_version: String::new(),
        client_features: Vec::new(),
        generation: n.generation,
        group: n.group.clone(),
        streams: Vec::new(),
        types: n
            .types
            .iter()
            .map(|(kind, t)| {
                let status = crate::admin::TypeStatusJson {
                    state: t.state,
                    version_sent: String::new(),
                    version_acked: t.version_acked.clone(),
                    nonce: String::new(),
                    error: t.error.clone(),
                    rejected_version: None,
                    rejected_changes: Vec::new(),
                    oversized_bytes: None,
                    not_found: Vec::new(),
                    last_change: String::new(),
                    last_good: t.last_good.clone(),
                    kept: t.kept,
                };
                (kind.clone(), status)
            })
            .collect(),
    }
}

/// The last load (and its errors), and the source it read.
fn config(html: &mut String, status: &Status) {
    match &status.config {
        Some(c) if c.ok => {
            let _ = write!(
                html,
                "<p class=\"ok\">Config: generation {} loaded at {}, {} warning(s).</p>",
                c.generation,
                esc(&c.at),
                c.warnings.len()
            );
            if status.rollout.is_none() && c.generation != status.generation {
                let what = match &c.source {
                    Some(s) => format!("the documents in {}", esc(&s.url)),
                    None => "the files".to_string(),
                };
                let _ = write!(
                    html,
                    "<p class=\"bad\">Generation {} serves every node: the rollout of generation {} was aborted, and {what} differ from what serves.</p>",
                    status.generation, c.generation
                );
            }
        }
        Some(c) => {
            let _ = if c.generation == 0 {
                write!(
                    html,
                    "<p class=\"bad\">Config: the last load at {} FAILED, and nothing has loaded yet: no node is served until the files load.</p><ul>",
                    esc(&c.at)
                )
            } else {
                write!(
                    html,
                    "<p class=\"bad\">Config: the last load at {} FAILED; generation {} keeps serving.</p><ul>",
                    esc(&c.at),
                    c.generation
                )
            };
            for e in &c.errors {
                let _ = write!(html, "<li class=\"err\">{}</li>", esc(e));
            }
            html.push_str("</ul>");
        }
        None => html.push_str("<p>Config: nothing loaded yet.</p>"),
    }
    // `--source`: where the documents come from, and whether it answers.
    if let Some(source) = status.config.as_ref().and_then(|c| c.source.as_ref()) {
        let revision = status
            .config
            .as_ref()
            .and_then(|c| c.revision)
            .map(|r| format!(" at revision {r}"))
            .unwrap_or_default();
        let _ = if source.answering {
            write!(
                html,
                "<p class=\"ok\">Source: {}{revision}, answering since {}.</p>",
                esc(&source.url),
                esc(&source.since)
            )
        } else {
            write!(
                html,
                "<p class=\"bad\">Source: {} does NOT answer since {} ({}); the last good generation keeps serving{revision}.</p>",
                esc(&source.url),
                esc(&source.since),
                esc(source.error.as_deref().unwrap_or("no answer"))
            )
        };
    }
    for task in &status.tasks_down {
        let _ = write!(
            html,
            "<p class=\"bad\">Task down: {} stopped at {} ({}; {} time(s)); started again at {}.</p>",
            esc(&task.task),
            esc(&task.since),
            esc(&task.cause),
            task.stops,
            esc(&task.restart_at)
        );
    }
}

/// A staged rollout on this replica, and the fleet's rollout kept in etcd.
fn rollouts(html: &mut String, status: &Status) {
    if let Some(r) = &status.rollout {
        let class = if r.state == crate::admin::RolloutState::Halted {
            "bad"
        } else {
            "ok"
        };
        let _ = write!(
            html,
            "<p class=\"{class}\" id=\"rollout\">Rollout {} since {}: generation {} to the canaries ({}), \
             generation {} to every other node.",
            esc(r.state.name()),
            esc(&r.since),
            r.candidate,
            esc(&r.canary),
            r.stable
        );
        if let Some(reason) = &r.reason {
            let _ = write!(html, " Halted: {}", esc(reason));
        }
        html.push_str("</p>");
    }
    if let Some(f) = &status.fleet {
        let class = if f.state == Some(crate::admin::RolloutState::Halted) {
            "bad"
        } else {
            "ok"
        };
        let _ = write!(
            html,
            "<p class=\"{class}\">Fleet rollout (etcd): revision {} promoted {} by {}",
            f.promoted.map_or("?".to_string(), |p| p.to_string()),
            esc(&f.promoted_at),
            esc(&f.promoted_by)
        );
        if let (Some(candidate), Some(state)) = (f.candidate, &f.state) {
            let _ = write!(
                html,
                "; revision {candidate} {} on the canaries",
                esc(state.name())
            );
        }
        if let Some(reason) = &f.reason {
            let _ = write!(html, ". Halted: {}", esc(reason));
        }
        html.push_str(".</p><ul>");
        for r in f.replicas.iter().filter(|_| f.candidate.is_some()) {
            let verdict = match (&r.nacked, r.current) {
                (Some(nack), true) => format!("NACK: {nack}"),
                (None, true) => format!("{} of {} canaries synced", r.synced, r.canaries),
                (_, false) => "no verdict on this candidate".to_string(),
            };
            let this = if r.replica == f.replica {
                " (this one)"
            } else {
                ""
            };
            let _ = write!(
                html,
                "<li>replica {}{this}: {}</li>",
                esc(&r.replica),
                esc(&verdict)
            );
        }
        html.push_str("</ul>");
    }
}

/// The replicas behind the view: from etcd, a row per replica, what keeps the fleet from
/// done, and the other replicas' proxies that are not synced; from files, that the view is
/// this replica's alone.
fn replicas(html: &mut String, status: &Status) {
    let Some(replicas) = &status.replicas else {
        return;
    };
    if !replicas.shared() {
        html.push_str(
            "<p id=\"replicas\">View: this replica's proxies only (the files are not a store \
             replicas share).</p>",
        );
        return;
    }
    let (sharing, left) = replicas.sharing_and_left();
    let sharing = match sharing {
        1 => "1 replica shares".to_string(),
        n => format!("{n} replicas share"),
    };
    let followed =
        match (&replicas.error, replicas.stale) {
            (Some(e), true) => {
                format!(
            "<span class=\"stale\">stale: this replica cannot follow the summaries since {} \
             ({}); the other replicas' rows are as last read</span>",
            if replicas.read_at.is_empty() { "it started" } else { replicas.read_at.as_str() },
            esc(e)
        )
            }
            _ => "followed live".to_string(),
        };
    let _ = write!(
        html,
        "<h2 id=\"replicas\">Replicas</h2><p>{sharing} this view through etcd{}; {followed}.</p><table><tr>",
        if left > 0 {
            format!(" ({left} left)")
        } else {
            String::new()
        },
    );
    for column in crate::admin::view::ReplicaRow::COLUMNS {
        let _ = write!(html, "<th>{}</th>", esc(column));
    }
    html.push_str("</tr>");
    for row in crate::admin::view::rows(replicas) {
        let class = row.tone.class();
        html.push_str("<tr>");
        for (i, cell) in row.cells().iter().enumerate() {
            // The standing's cell carries the row's colour.
            if i == 2 {
                let _ = write!(html, "<td class=\"{class}\">{}</td>", esc(cell));
            } else {
                let _ = write!(html, "<td>{}</td>", esc(cell));
            }
        }
        html.push_str("</tr>");
    }
    html.push_str("</table><ul>");
    for (label, why) in crate::admin::view::notes(status) {
        let _ = write!(
            html,
            "<li class=\"bad\">{}: {}</li>",
            esc(&label),
            esc(&why)
        );
    }
    html.push_str("</ul>");
}

/// Streams turned away, and the certificates read from files.
fn notices(html: &mut String, status: &Status) {
    if let Some(n) = status.new_streams.as_ref().filter(|n| n.turned_away > 0) {
        let _ = write!(
            html,
            "<p class=\"bad\">New streams: {} turned away past {} a second, {} at once \
             (--max-new-streams-per-second): proxies retry with backoff.</p>",
            n.turned_away, n.per_second, n.burst
        );
    }
    if !status.certificates.is_empty() {
        html.push_str("<p>Certificates read from files (switchyard_files):</p><ul>");
        for c in &status.certificates {
            let class = if c.state == "ok" {
                ""
            } else {
                " class=\"bad\""
            };
            let _ = write!(
                html,
                "<li{class}>{} {}: serial {}, expires {} ({}) — {}</li>",
                esc(&c.secret),
                esc(&c.role),
                esc(&c.serial),
                esc(&c.not_after),
                esc(&c.state),
                esc(&c.file)
            );
        }
        html.push_str("</ul>");
    }
}

/// The filter of the nodes table.
fn filter_form(html: &mut String, query: &PageQuery) {
    let _ = write!(
        html,
        "<form method=\"get\">Filter: <input name=\"q\" value=\"{}\" placeholder=\"node id or cluster\"> \
         <select name=\"state\"><option value=\"\">any state</option>",
        esc(&query.q)
    );
    let states = SyncStatus::ALL.map(SyncStatus::name);
    for s in states.into_iter().chain(["ALL_SYNCED", "UPDATING"]) {
        let selected = if query.state == s { " selected" } else { "" };
        let _ = write!(html, "<option{selected}>{s}</option>");
    }
    html.push_str("</select> <button>Show</button></form>");
}

/// The nodes that match the filter, problems first, a page at a time: every proxy of the
/// fleet listed, with its replica when the view is shared.
fn nodes_table(
    html: &mut String,
    status: &Status,
    listed: &[Listed<'_>],
    query: &PageQuery,
    kinds: &[&str],
) {
    let mut shown: Vec<&Listed<'_>> = listed.iter().filter(|l| matches(l, query)).collect();
    shown.sort_by(|a, b| {
        problem_rank(&a.node)
            .cmp(&problem_rank(&b.node))
            .then_with(|| natural_cmp(&a.node.node_id, &b.node.node_id))
    });
    let shared = status.replicas.as_ref().is_some_and(|r| r.shared());
    let pages = shown.len().div_ceil(PAGE_SIZE).max(1);
    let page = query.page.unwrap_or(1).clamp(1, pages);
    let _ = write!(
        html,
        "<p>{} node(s) match; page {page} of {pages}.</p><table id=\"nodes\"><tr><th>Node</th><th>Cluster</th>{}\
         <th>Streams</th><th>Agent</th><th>Version</th>",
        shown.len(),
        if shared { "<th>Replica</th>" } else { "" }
    );
    for k in kinds {
        let _ = write!(html, "<th>{k}</th>");
    }
    html.push_str("</tr>");
    let this = status.replicas.as_ref().map(|r| r.this.as_str());
    let source = status.source_url();
    // Another replica's proxies, as last read when this replica cannot follow the view.
    let stale = status.replicas.as_ref().is_some_and(|r| r.stale);
    for l in shown.iter().skip((page - 1) * PAGE_SIZE).take(PAGE_SIZE) {
        let replica = shared.then(|| match (l.replica, stale) {
            (Some(r), true) => format!("<td class=\"stale\">{} (stale)</td>", esc(r)),
            (Some(r), false) => format!("<td>{}</td>", esc(r)),
            (None, _) => format!("<td>{}</td>", esc(this.unwrap_or(""))),
        });
        node_row(html, l, replica.as_deref(), kinds, source);
        html.push_str("</tr>");
    }
    html.push_str("</table><p>");
    let link = |p: usize| {
        format!(
            "/?q={}&amp;state={}&amp;page={p}",
            query_value(&query.q),
            query_value(&query.state)
        )
    };
    if page > 1 {
        let _ = write!(html, "<a href=\"{}\">previous</a> ", link(page - 1));
    }
    if page < pages {
        let _ = write!(html, "<a href=\"{}\">next</a>", link(page + 1));
    }
    html.push_str("</p>");
}

/// One node's row: its streams, agent, version, and each type's state (a NACK with the way
/// back).
fn node_row(
    html: &mut String,
    l: &Listed<'_>,
    replica: Option<&str>,
    kinds: &[&str],
    source_url: Option<&str>,
) {
    let n: &NodeStatus = &l.node;
    let streams: Vec<String> = n.streams.iter().map(|s| s.label()).collect();
    // P33: types the proxy asks for that this server does not serve.
    let unknown: Vec<&str> = n
        .streams
        .iter()
        .flat_map(|s| s.unknown_types.iter().map(|u| u.type_url.as_str()))
        .collect();
    let unknown = if unknown.is_empty() {
        String::new()
    } else {
        format!(
            "<div class=\"err\">asks for types not served here: {}</div>",
            esc(&unknown.join(", "))
        )
    };
    // Its replica's cell, made by the table (escaped there), when the view is shared.
    let replica = replica.unwrap_or("");
    // Another replica's proxy: its streams and agent are on that replica's page.
    let (streams, agent) = match l.replica {
        Some(_) => ("-".to_string(), "-".to_string()),
        None => (
            esc(&streams.join(", ")),
            esc(&format!("{} {}", n.user_agent, n.user_agent_version)),
        ),
    };
    let version = match super::view::short(&l.version) {
        "" => format!("generation {}", n.generation),
        v => v.to_string(),
    };
    let _ = write!(
        html,
        "<tr><td><a href=\"/config_dump?node={}\">{}</a></td><td>{}</td>{replica}<td>{streams}{unknown}</td><td>{agent}</td><td>{}</td>",
        query_value(&n.node_id),
        esc(&n.node_id),
        esc(&n.node_cluster),
        esc(&version)
    );
    for k in kinds {
        match n.types.get(*k) {
            Some(t) => {
                let title = format!(
                    "sent {} / ACKed {} · since {}",
                    t.version_sent, t.version_acked, t.last_change
                );
                let _ = write!(
                    html,
                    "<td class=\"{}\" title=\"{}\">{}",
                    t.state,
                    esc(&title),
                    t.state.name().replace('_', " ")
                );
                if let Some(e) = &t.error {
                    let back = crate::admin::view::going_back(
                        &n.node_id,
                        t.last_good.as_ref(),
                        t.kept.as_ref(),
                        source_url,
                    );
                    let _ = write!(
                        html,
                        "<div class=\"err\">{}</div><div class=\"err\">{}. \
                         <code>switchyard config-dump {}</code> shows what it holds.</div>",
                        esc(e),
                        next_step_html(&capitalized(&back)),
                        esc(&n.node_id)
                    );
                }
                if !t.rejected_changes.is_empty() {
                    html.push_str(
                        "<div class=\"err\">what it changed, against what the proxy runs:<ul>",
                    );
                    for c in &t.rejected_changes {
                        let _ = write!(html, "<li>{}</li>", esc(&c.text()));
                    }
                    html.push_str("</ul></div>");
                }
                if !t.not_found.is_empty() {
                    let _ = write!(
                        html,
                        "<div class=\"err\">not found: {}</div>",
                        esc(&t.not_found.join(", "))
                    );
                }
                html.push_str("</td>");
            }
            None => html.push_str("<td>-</td>"),
        }
    }
}

/// Who wrote a generation's documents, why, and whether it was a rollback (`--now`).
fn written(e: &crate::history::Entry) -> String {
    let mut text = [e.author.as_deref(), e.message.as_deref()]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(": ");
    if let Some(r) = e.rollback {
        let now = if e.now {
            ", --now: every node at once"
        } else {
            ""
        };
        text = format!("{text} (rollback to revision {r}{now})")
            .trim()
            .to_string();
    }
    if text.is_empty() {
        "-".into()
    } else {
        text
    }
}

/// The last generations published: when, from what, what changed, who took it.
fn history(html: &mut String, entries: &[crate::history::Entry]) {
    if entries.is_empty() {
        return;
    }
    html.push_str(
        "<h2>Recent generations</h2><table id=\"generations\"><tr><th>Generation</th><th>Published</th>\
         <th>Revision</th><th>Written by, why</th><th>Files</th><th>Resources</th><th>ACKed</th>\
         <th>NACKed</th></tr>",
    );
    for e in entries {
        let [added, changed, removed] = e.counts;
        let mut resources = format!("+{added} ~{changed} -{removed}");
        let names: Vec<String> = e
            .added
            .iter()
            .map(|n| format!("+{n}"))
            .chain(e.changed.iter().map(|n| format!("~{n}")))
            .chain(e.removed.iter().map(|n| format!("-{n}")))
            .take(6)
            .collect();
        if !names.is_empty() {
            resources.push_str(&format!(": {}", names.join(", ")));
        }
        let nacked = if e.nacked > 0 { " class=\"bad\"" } else { "" };
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td{nacked}>{}</td></tr>",
            e.generation,
            esc(&e.at),
            e.revision.map_or("-".to_string(), |r| r.to_string()),
            esc(&written(e)),
            esc(&e.files_summary(6)),
            esc(&resources),
            e.acked,
            e.nacked
        );
    }
    html.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{ConfigStatus, StreamStatus, TypeStatusJson};

    fn node(id: &str, cds: &str, error: Option<&str>) -> NodeStatus {
        NodeStatus {
            node_id: id.into(),
            node_cluster: "frontend".into(),
            user_agent: "envoy".into(),
            user_agent_version: "1.40.0".into(),
            client_features: vec![],
            generation: 3,
            group: String::new(),
            streams: vec![StreamStatus {
                peer: "p".into(),
                stream: "ADS".into(),
                protocol: "delta".into(),
                connected_since: "t".into(),
                plan: None,
                polls: None,
                last_poll: None,
                holds_gate_until: None,
                unknown_types: Vec::new(),
            }],
            types: [(
                "CDS".to_string(),
                TypeStatusJson {
                    state: SyncStatus::from_name(cds).expect("a state"),
                    version_sent: "v2".into(),
                    version_acked: "v1".into(),
                    nonce: "1".into(),
                    error: error.map(str::to_string),
                    rejected_version: None,
                    rejected_changes: Vec::new(),
                    oversized_bytes: None,
                    not_found: Vec::new(),
                    last_change: "t".into(),
                    last_good: None,
                    kept: None,
                },
            )]
            .into(),
        }
    }

    fn fleet(n: usize) -> Status {
        Status {
            schema: crate::admin::STATUS_SCHEMA.into(),
            at: "2026-12-04T10:00:00Z".into(),
            nodes: (0..n)
                .map(|i| {
                    if i == 7 {
                        node(
                            &format!("edge-{i:05}"),
                            "NACKED",
                            Some("<b>bad</b> cluster"),
                        )
                    } else {
                        node(&format!("edge-{i:05}"), "SYNCED", None)
                    }
                })
                .collect(),
            config: Some(ConfigStatus {
                ok: true,
                at: "t".into(),
                generation: 3,
                errors: vec![],
                warnings: vec![],
                revision: None,
                read: None,
                pending: false,
                source: None,
                unread: None,
            }),
            rollout: None,
            generation: 3,
            server: Default::default(),
            certificates: Vec::new(),
            new_streams: None,
            fleet: None,
            history: Vec::new(),
            replicas: None,
            tasks_down: Vec::new(),
        }
    }

    /// The headline says where the fleet stands, in the colour of who has to act, with the
    /// next step and its command; the page says what it is as of (and the source's
    /// position) and reloads itself.
    #[test]
    fn the_headline_says_where_the_fleet_stands_and_what_to_do_next() {
        let good = render(&fleet(3), &PageQuery::default());
        assert!(
            good.contains("<meta http-equiv=\"refresh\" content=\"10\">"),
            "{good}"
        );
        assert!(
            good.contains(
                "<p class=\"head good\" id=\"headline\"><b>Every connected node runs the \
                 newest generation</b>"
            ),
            "{good}"
        );
        assert!(good.contains("As of 2026-12-04T10:00:00Z"), "{good}");

        let mut nacking = fleet(9);
        if let Some(c) = nacking.config.as_mut() {
            c.read = Some(4);
        }
        let bad = render(&nacking, &PageQuery::default());
        assert!(
            bad.contains(
                "<p class=\"head act\" id=\"headline\"><b>A node rejected its \
                 configuration</b>. Next: fix the resource its NACK names, or roll back"
            ),
            "{bad}"
        );
        assert!(bad.contains("source at read 4 of the files"), "{bad}");
        assert!(
            bad.contains("<code>switchyard config-dump edge-00007</code> shows what it holds"),
            "{bad}"
        );

        let mut updating = fleet(3);
        updating.nodes[0].generation = 2;
        let amber = render(&updating, &PageQuery::default());
        assert!(
            amber.contains("<p class=\"head wait\" id=\"headline\">"),
            "{amber}"
        );
    }

    #[test]
    fn summary_first_then_one_page_of_rows_at_10000_nodes() {
        let status = fleet(10_000);
        let html = render(&status, &PageQuery::default());
        let summary = html.find("10000</b> nodes").expect("count of nodes");
        assert!(summary < html.find("<table id=\"nodes\">").expect("a table"));
        assert!(html.contains("<b>1</b> NACKing"));
        assert_eq!(html.matches("<tr><td>").count(), PAGE_SIZE);
        assert!(html.contains("page 1 of 100"));
        assert!(html.contains("next</a>") && !html.contains("previous</a>"));
        assert!(html.contains("generation 3"));
        assert!(!html.contains("<script"), "no JavaScript");
        assert!(
            !html.contains("http://") && !html.contains("https://"),
            "no external assets"
        );
    }

    #[test]
    fn a_node_mid_update_shows_its_step_and_what_is_held_back() {
        let mut status = fleet(3);
        status.nodes[1].streams[0].plan = Some(crate::admin::PlanStatusJson {
            step: 2,
            steps: 3,
            held_back: 1,
            nacked: Some("CDS".into()),
            since: "t".into(),
        });
        let html = render(&status, &PageQuery::default());
        assert!(html.contains("<b>1</b> mid-update"), "{html}");
        assert!(
            html.contains("ADS/delta (updating 2/3, 1 held back by a CDS NACK)"),
            "{html}"
        );
    }

    /// A NACK names what it rejected, where it is written (escaped); the certificates read from
    /// files and streams turned away show with the config.
    #[test]
    fn a_nack_shows_what_it_rejected_and_certificates_and_admission_show() {
        let mut status = fleet(3);
        let cds = status.nodes[1].types.get_mut("CDS").expect("CDS");
        cds.state = SyncStatus::Nacked;
        cds.rejected_changes = vec![crate::fleet::RejectedChange {
            resource: "clusters.yaml: clusters[1] \"<b>\"".into(),
            change: "added".into(),
            file_changed_at: Some("2026-12-01T10:00:00Z".into()),
        }];
        status.certificates = vec![crate::admin::CertificateStatus {
            secret: "edge".into(),
            role: "certificate_chain".into(),
            file: "/etc/certs/tls.crt".into(),
            subject: "CN=edge".into(),
            serial: "0A1B".into(),
            not_after: "2026-12-05T00:00:00Z".into(),
            state: "expiring".into(),
        }];
        status.new_streams = Some(crate::admin::NewStreamsStatus {
            per_second: 10,
            burst: 20,
            turned_away: 7,
        });
        let html = render(&status, &PageQuery::default());
        assert!(
            html.contains(
                "<li>clusters.yaml: clusters[1] &quot;&lt;b&gt;&quot; (added; the file changed \
                 at 2026-12-01T10:00:00Z)</li>"
            ),
            "{html}"
        );
        assert!(
            html.contains("<li class=\"bad\">edge certificate_chain: serial 0A1B"),
            "{html}"
        );
        assert!(html.contains("7 turned away past 10 a second"), "{html}");
    }

    /// The order of rows in the page's table: the node ids as they appear.
    fn row_ids(html: &str) -> Vec<String> {
        html.split("<tr><td><a href=\"/config_dump?node=")
            .skip(1)
            .filter_map(|row| row.split('>').nth(1))
            .filter_map(|rest| rest.split('<').next())
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn names_not_found_and_types_not_served_show_escaped() {
        let mut status = fleet(3);
        let cds = status.nodes[1].types.get_mut("CDS").expect("CDS");
        cds.not_found = vec!["<gone>".into()];
        status.nodes[2].streams[0].unknown_types = vec![crate::fleet::UnknownTypeReport {
            type_url: "type.googleapis.com/x.<Widget>".into(),
            names: vec![],
            state: SyncStatus::Synced,
        }];
        let html = render(&status, &PageQuery::default());
        assert!(html.contains("not found: &lt;gone&gt;"), "P32: {html}");
        assert!(
            html.contains("asks for types not served here: type.googleapis.com/x.&lt;Widget&gt;"),
            "P33: {html}"
        );
    }

    #[test]
    fn problems_first_then_node_ids_in_natural_order() {
        let status = Status {
            schema: crate::admin::STATUS_SCHEMA.into(),
            at: "2026-12-04T10:00:00Z".into(),
            nodes: vec![
                node("edge-10", "SYNCED", None),
                node("edge-9", "STALE", None),
                node("edge-2", "SYNCED", None),
                node("edge-100", "NACKED", Some("no")),
                node("edge-1", "SYNCED", None),
                node("edge-11", "STALE", None),
                node("edge-007", "SYNCED", None),
            ],
            config: None,
            rollout: None,
            generation: 3,
            server: Default::default(),
            certificates: Vec::new(),
            new_streams: None,
            fleet: None,
            history: Vec::new(),
            replicas: None,
            tasks_down: Vec::new(),
        };
        let html = render(&status, &PageQuery::default());
        assert_eq!(
            row_ids(&html),
            ["edge-100", "edge-9", "edge-11", "edge-1", "edge-2", "edge-007", "edge-10"]
        );
        assert_eq!(natural_cmp("a2", "a10"), std::cmp::Ordering::Less);
        assert_eq!(natural_cmp("a02", "a2"), std::cmp::Ordering::Greater);
        assert_eq!(natural_cmp("b", "a9"), std::cmp::Ordering::Greater);
        assert_eq!(natural_cmp("9", "a"), std::cmp::Ordering::Less);
    }

    #[test]
    fn summary_counts_link_to_their_filters() {
        let mut status = fleet(9);
        status.nodes[3].streams[0].plan = Some(crate::admin::PlanStatusJson {
            step: 1,
            steps: 2,
            held_back: 0,
            nacked: None,
            since: "t".into(),
        });
        let html = render(&status, &PageQuery::default());
        for (filter, count) in [
            ("NACKED", "<b>1</b> NACKing"),
            ("STALE", "<b>0</b> with a response"),
            ("UPDATING", "<b>1</b> mid-update"),
            ("ALL_SYNCED", "<b>8</b> with every type SYNCED"),
        ] {
            assert!(
                html.contains(&format!("<a href=\"/?state={filter}\">{count}")),
                "{filter}: {html}"
            );
        }
        let only = |state: &str| {
            row_ids(&render(
                &status,
                &PageQuery {
                    state: state.into(),
                    ..Default::default()
                },
            ))
        };
        assert_eq!(only("UPDATING"), ["edge-00003"]);
        assert_eq!(only("ALL_SYNCED").len(), 8);
        assert!(!only("ALL_SYNCED").contains(&"edge-00007".to_string()));
    }

    #[test]
    fn a_rollout_shows_its_state_generations_and_why_it_halted() {
        let mut status = fleet(2);
        status.rollout = Some(crate::admin::RolloutStatus {
            state: crate::admin::RolloutState::Halted,
            stable: 3,
            candidate: 4,
            canary: "id \"canary-*\"".into(),
            reason: Some("canary \"canary-1\" rejected CDS: <bad>".into()),
            since: "t".into(),
        });
        let html = render(&status, &PageQuery::default());
        assert!(
            html.contains("Rollout HALTED since t: generation 4 to the canaries (id &quot;canary-*&quot;), generation 3 to every other node. Halted: canary &quot;canary-1&quot; rejected CDS: &lt;bad&gt;"),
            "{html}"
        );
        assert!(
            html.contains("<th>Version</th>") && html.contains("<td>generation 3</td>"),
            "{html}"
        );
    }

    #[test]
    fn filters_by_state_and_text_and_escapes_what_proxies_send() {
        let status = fleet(300);
        let html = render(
            &status,
            &PageQuery {
                state: "NACKED".into(),
                ..Default::default()
            },
        );
        assert_eq!(html.matches("<tr><td>").count(), 1);
        assert!(html.contains("edge-00007"));
        // The NACK text is shown inline, escaped.
        assert!(html.contains("&lt;b&gt;bad&lt;/b&gt; cluster"));
        assert!(!html.contains("<b>bad</b>"));
        let html = render(
            &status,
            &PageQuery {
                q: "EDGE-0029".into(),
                ..Default::default()
            },
        );
        assert_eq!(html.matches("<tr><td>").count(), 10, "edge-00290..299");
        let last = render(
            &status,
            &PageQuery {
                page: Some(99),
                ..Default::default()
            },
        );
        assert!(
            last.contains("page 3 of 3"),
            "a page past the end shows the last"
        );
    }

    /// The fleet's rollout kept in etcd and the recent generations, escaped (a NACK
    /// text and a replica's name come from outside).
    #[test]
    fn the_fleet_rollout_and_the_recent_generations_are_shown() {
        let mut status = fleet(1);
        status.fleet = Some(crate::admin::FleetStatus {
            replica: "edge-7d9f-1".into(),
            promoted: Some(7),
            promoted_at: "2026-12-03T15:31:20.230Z".into(),
            promoted_by: "1 canary and the bake".into(),
            candidate: Some(16),
            state: Some(crate::admin::RolloutState::Halted),
            reason: Some("canary <b> rejected CDS".into()),
            aborted: None,
            replicas: vec![crate::admin::ReplicaVerdict {
                replica: "canary-5c2a-1".into(),
                current: true,
                canaries: 1,
                synced: 0,
                nacked: Some("canary-1 rejected CDS: <bad>".into()),
            }],
        });
        status.history = vec![crate::history::Entry {
            generation: 3,
            at: "t".into(),
            revision: Some(16),
            files: vec!["change etcd:/sy/a.yaml".into()],
            changed: vec!["CDS a".into()],
            counts: [0, 1, 0],
            nacked: 1,
            author: Some("alice".into()),
            message: Some("slower connects".into()),
            ..Default::default()
        }];
        let html = render(&status, &PageQuery::default());
        assert!(
            html.contains("<p class=\"bad\">Fleet rollout (etcd): revision 7 promoted"),
            "{html}"
        );
        assert!(
            html.contains("revision 16 HALTED on the canaries"),
            "{html}"
        );
        assert!(
            html.contains("Halted: canary &lt;b&gt; rejected CDS"),
            "{html}"
        );
        assert!(
            html.contains(
                "<li>replica canary-5c2a-1: NACK: canary-1 rejected CDS: &lt;bad&gt;</li>"
            ),
            "{html}"
        );
        assert!(html.contains("<h2>Recent generations</h2>"), "{html}");
        assert!(
            html.contains("<td>3</td><td>t</td><td>16</td><td>alice: slower connects</td><td>change etcd:/sy/a.yaml</td><td>+0 ~1 -0: ~CDS a</td><td>0</td><td class=\"bad\">1</td>"),
            "{html}"
        );
    }

    /// One view of the fleet (operations.md): every replica's line, one that left shown as
    /// such and not counted as sharing, one that vanished, and another replica's NACKing
    /// proxy with its words, escaped.
    #[test]
    fn the_replicas_section_shows_every_replica_and_their_proxies_problems() {
        use crate::admin::replicas::{
            NodeSummary, ReplicaSummary, ReplicasStatus, TypeSummary, Vanished,
        };
        let mut status = fleet(1);
        let replica = |name: &str, standing: &str| ReplicaSummary {
            replica: name.into(),
            at: "2026-12-04T10:00:00.000Z".into(),
            standing: crate::admin::standing::Standing::from_name(standing).expect("a standing"),
            generation: 1,
            revision: Some(9),
            config_ok: true,
            proxies: 1,
            synced: 1,
            ..ReplicaSummary::default()
        };
        let mut left = replica("b", "DONE");
        left.left = true;
        let mut nacking = replica("c", "NACKED");
        (nacking.synced, nacking.nacked) = (0, 1);
        nacking.nodes = vec![NodeSummary {
            node_id: "edge-<9>".into(),
            node_cluster: "edge".into(),
            generation: 1,
            types: [(
                "CDS".to_string(),
                TypeSummary {
                    state: crate::fleet::SyncStatus::Nacked,
                    version_acked: "v1".into(),
                    error: Some("bad <cluster>".into()),
                    last_good: Some(crate::admin::LastGood {
                        generation: 1,
                        revision: Some(8),
                        version: "0123456789abcdef".into(),
                    }),
                    kept: None,
                },
            )]
            .into(),
            ..NodeSummary::default()
        }];
        if let Some(config) = status.config.as_mut() {
            config.source = Some(crate::admin::SourceStatus {
                url: "etcd://127.0.0.1:2379/sy".into(),
                answering: true,
                since: String::new(),
                error: None,
            });
        }
        status.replicas = Some(ReplicasStatus {
            store: crate::admin::replicas::Store::Etcd,
            this: "a".into(),
            read_at: "2026-12-04T10:00:01.000Z".into(),
            replicas: vec![replica("a", "DONE"), left, nacking],
            vanished: vec![Vanished {
                replica: "d".into(),
                since: "2026-12-04T09:59:50.000Z".into(),
                proxies: 4,
                ..Vanished::default()
            }],
            ..ReplicasStatus::default()
        });
        let html = render(&status, &PageQuery::default());
        assert!(
            html.contains(
                "<p>2 replicas share this view through etcd (1 left); followed live.</p>"
            ),
            "{html}"
        );
        assert!(
            html.contains("<tr><td>a (this one)</td><td>-</td><td class=\"ok\">DONE</td>"),
            "{html}"
        );
        assert!(
            html.contains("<tr><td>b</td><td>-</td><td class=\"ok\">LEFT</td>"),
            "{html}"
        );
        assert!(
            html.contains("<tr><td>c</td><td>-</td><td class=\"bad\">NACKED</td>"),
            "{html}"
        );
        assert!(
            html.contains(
                "<tr><td>d</td><td>-</td><td class=\"bad\">VANISHED</td><td>-</td><td>-</td><td>4</td>"
            ),
            "{html}"
        );
        // Another replica's proxy is in the nodes table, with its replica, its NACK and
        // the way back; the counts are the fleet's (b left: not counted).
        assert!(
            html.contains(
                "<td><a href=\"/config_dump?node=edge-%3C9%3E\">edge-&lt;9&gt;</a></td>\
                 <td>edge</td><td>c</td><td>-</td><td>-</td><td>generation 1</td>"
            ),
            "{html}"
        );
        assert!(
            html.contains("<div class=\"err\">bad &lt;cluster&gt;</div>"),
            "{html}"
        );
        assert!(
            html.contains(
                "Last good: revision 8 (version 0123456789ab), which it still runs; to go back: \
                 <code>switchyard rollback --source etcd://127.0.0.1:2379/sy 8</code>."
            ),
            "{html}"
        );
        assert!(html.contains("<b>2</b> nodes on 2 replicas"), "{html}");
        assert!(html.contains("<b>1</b> NACKing"), "{html}");
        assert!(html.contains("1 of 2 proxies run it"), "{html}");
        // While this replica cannot follow the view, another's proxies are as last read.
        let mut stale = status.clone();
        if let Some(r) = stale.replicas.as_mut() {
            r.stale = true;
        }
        let html = render(&stale, &PageQuery::default());
        assert!(
            html.contains("<td class=\"stale\">c (stale)</td>"),
            "{html}"
        );
        // The filter searches every replica's proxies, and by replica.
        for q in ["edge-<9", "c"] {
            let query = PageQuery {
                q: q.into(),
                ..PageQuery::default()
            };
            let html = render(&status, &query);
            assert!(html.contains("<p>1 node(s) match"), "{q}: {html}");
            assert!(html.contains("edge-&lt;9&gt;</a>"), "{q}: {html}");
        }
        if let Some(r) = status.replicas.as_mut() {
            r.replicas.retain(|r| r.replica != "c");
        }
        let html = render(&status, &PageQuery::default());
        assert!(
            html.contains("<p>1 replica shares this view through etcd (1 left); followed live"),
            "{html}"
        );
    }
}
