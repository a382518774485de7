//! `switchyard status`: what every proxy has, from a running server's `/status`, as a table
//! or the JSON; and the text of a rollout (also `switchyard rollout status`). What proxies
//! sent (node ids, NACK texts, type URLs) is escaped before it reaches a terminal.
//!
//! Must not: change anything on the server.

use std::process::ExitCode;

use clap::{Args, ValueEnum};

use super::admin_api::{admin_call, admin_target, fetch_status_after, AdminTarget};
use super::flags::AdminArgs;
use super::runtime;

/// Exit code of `switchyard status` when a node rejected its latest configuration.
pub const EXIT_NACKED: u8 = 2;
/// Exit code of `switchyard status` when the server's last config load failed (it serves the
/// last good snapshot; the edit never took). Checked first.
pub const EXIT_LOAD_FAILED: u8 = 3;
/// Exit code of `switchyard status` while a staged rollout is in progress (canaries or
/// baking): most nodes still run the generation before.
pub const EXIT_ROLLING_OUT: u8 = 4;
/// Exit code of `switchyard status` (and `rollout status`) when a rollout halted, or was
/// aborted and the files still differ from what serves: the newest generation will not
/// reach every node without someone acting.
pub const EXIT_ROLLOUT_STOPPED: u8 = 5;
/// Exit code of `switchyard status --wait` when its `--timeout` passed first.
pub const EXIT_TIMED_OUT: u8 = 6;
/// Exit code of `switchyard status` while a node is still taking the newest generation (a
/// response not yet ACKed, a make-before-break plan in progress, an older generation).
pub const EXIT_UPDATING: u8 = 7;
/// Exit code of `switchyard status` while the server's source (etcd) does not answer: the
/// last good generation serves, but no edit reaches the fleet.
pub const EXIT_SOURCE_DOWN: u8 = 8;
/// Exit code of `switchyard status` (etcd source) while the replica asked cannot follow the
/// other replicas' summaries in etcd: what it shows of them may be stale.
pub const EXIT_REPLICA_UNSEEN: u8 = 9;
/// Exit code of `apply --wait` and `rollback --wait` when the change was written but the
/// fleet cannot be watched: the admin API at `--admin-addr` does not answer (within
/// [`UNWATCHABLE_AFTER`], or the wait's timeout if shorter).
pub const EXIT_UNWATCHABLE: u8 = 10;
/// Exit code of `switchyard status` while a long-running task of the replica stopped (ended
/// or panicked) and waits to be started again (`/status`'s `tasks_down`).
pub const EXIT_TASK_DOWN: u8 = 11;
/// How long a wait after a write goes on asking an admin API that does not answer.
pub const UNWATCHABLE_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub admin: AdminArgs,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Wait for everything written to the source before this call: the server settles its
    /// source first (reads the files again; from etcd, follows the prefix up to its
    /// revision now), and a refused change exits 3 with its errors. Then wait until every
    /// connected node runs that generation (or a newer one) on every type and no rollout is
    /// in progress (exit 0), or until that cannot happen without someone acting (a NACK, a
    /// failed load, a halted or aborted rollout, a source that does not answer: their exit
    /// codes), or until `--timeout` (exit 6). From etcd, a view this replica cannot follow
    /// (stale) is waited through while what it sees gets there. Each replica's report counts
    /// once it is about the awaited revision. Like `kubectl rollout status`.
    #[arg(long)]
    pub wait: bool,
    /// With `--wait`: wait for this generation (or a newer one) instead of settling the
    /// source.
    #[arg(long, value_name = "N", requires = "wait", conflicts_with = "revision")]
    pub generation: Option<u64>,
    /// With `--wait`, from etcd: wait for the documents as of this revision (what `apply`
    /// printed) instead of the revision now.
    #[arg(long, value_name = "R", requires = "wait")]
    pub revision: Option<i64>,
    /// With `--wait`: how long to wait at most.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = humantime::parse_duration, requires = "wait")]
    pub timeout: std::time::Duration,
}

use crate::admin::standing::files_differ_from_what_serves;
use crate::admin::standing::seen_standing;
pub use crate::admin::standing::{verdict, Standing};

impl Standing {
    /// The exit code that says it.
    pub fn code(self) -> u8 {
        match self {
            Standing::Done => 0,
            Standing::LoadFailed => EXIT_LOAD_FAILED,
            Standing::TaskDown => EXIT_TASK_DOWN,
            Standing::SourceDown => EXIT_SOURCE_DOWN,
            Standing::RolloutStopped => EXIT_ROLLOUT_STOPPED,
            Standing::Nacked => EXIT_NACKED,
            Standing::RollingOut => EXIT_ROLLING_OUT,
            Standing::Updating | Standing::Unknown => EXIT_UPDATING,
            Standing::ReplicaUnseen => EXIT_REPLICA_UNSEEN,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// One row per node, a column per type.
    Table,
    /// The admin API's /status JSON.
    Json,
}

/// `switchyard status`: ask a running server's admin API and print what every proxy has.
pub(super) fn run(args: &StatusArgs) -> ExitCode {
    let wait = args.wait.then_some(Wait {
        generation: args.generation,
        revision: args.revision,
        timeout: args.timeout,
        written: None,
    });
    watch(&args.admin, args.output, wait)
}

/// What `--wait` (of `status`, or `apply`) waits for, and how long at most.
#[derive(Clone, Copy, Debug)]
pub(super) struct Wait {
    /// This generation (or a newer one), instead of settling the source.
    pub generation: Option<u64>,
    /// From etcd: the documents as of this revision, instead of the revision now.
    pub revision: Option<i64>,
    pub timeout: std::time::Duration,
    /// The revision this command wrote (`apply`, `rollback`): an admin API that does not
    /// answer is then said as [`EXIT_UNWATCHABLE`], not waited on to the timeout.
    pub written: Option<i64>,
}

/// Ask the server at `admin` where the fleet stands, and print it; with `wait`, settle the
/// source first and ask again until the fleet is done or cannot get there by itself.
pub(super) fn watch(admin: &AdminArgs, output: Output, wait: Option<Wait>) -> ExitCode {
    let runtime = match runtime(tokio::runtime::Builder::new_current_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let (target, token) = match admin_target(admin) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let started = std::time::Instant::now();
    let timeout = wait.map_or(std::time::Duration::ZERO, |w| w.timeout);
    // After a write, an admin API that does not answer is not a fleet that did not
    // converge: said as such once it has not answered for a while.
    let written = wait.and_then(|w| w.written);
    let unwatchable = |e: &anyhow::Error| -> Option<ExitCode> {
        let written = written?;
        (started.elapsed() >= UNWATCHABLE_AFTER.min(timeout)).then(|| {
            eprintln!(
                "error: applied at revision {written}, but the fleet cannot be watched: {e:#}; \
                 `switchyard status --wait --revision {written} --admin-addr ADDR` on a replica \
                 that answers waits for it (exit {EXIT_UNWATCHABLE})"
            );
            ExitCode::from(EXIT_UNWATCHABLE)
        })
    };
    let mut wanted = wait.and_then(|w| w.generation).map(Target::Generation);
    if let Some(w) = wait.filter(|_| wanted.is_none()) {
        let mut said = false;
        wanted = loop {
            match runtime.block_on(settle(&target, token.as_deref(), w.revision)) {
                Ok(wanted) => break wanted,
                Err(Settling::Unreachable(e)) if written.is_some() && unwatchable(&e).is_some() => {
                    return ExitCode::from(EXIT_UNWATCHABLE);
                }
                Err(Settling::Unreachable(e)) if started.elapsed() < timeout => {
                    // The server may be restarting: go on asking until the time is up.
                    if !std::mem::replace(&mut said, true) {
                        eprintln!("waiting: {e:#}");
                    }
                    std::thread::sleep(POLL);
                }
                Err(Settling::Unreachable(e)) => {
                    eprintln!("error: {e:#}");
                    return ExitCode::from(EXIT_TIMED_OUT);
                }
                Err(Settling::Exit(code)) => return code,
            }
        };
    }
    let print = |status: &crate::admin::Status, body: &str| match output {
        Output::Json => println!("{body}"),
        Output::Table => print!("{}", status_table(status)),
    };
    let mut said = None;
    // The token of the status last answered: the next ask is held by the server until the
    // status differs (a long poll), instead of asked again after POLL.
    let mut after: Option<String> = None;
    let (status, body, verdict) = loop {
        let hold = timeout
            .saturating_sub(started.elapsed())
            .min(LONG_POLL)
            .max(std::time::Duration::from_millis(1));
        let fetched = runtime.block_on(fetch_status_after(
            &target,
            token.as_deref(),
            after.as_deref().map(|a| (a, hold)),
        ));
        let (status, body) = match fetched {
            Ok((status, body, token)) => {
                after = token;
                (status, body)
            }
            Err(e) if written.is_some() && unwatchable(&e).is_some() => {
                return ExitCode::from(EXIT_UNWATCHABLE);
            }
            Err(e) if wait.is_some() && started.elapsed() < timeout => {
                // The server may be restarting: go on asking until the time is up.
                if said.is_none() {
                    eprintln!("waiting: {e:#}");
                }
                after = None;
                std::thread::sleep(POLL);
                continue;
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                return if wait.is_some() {
                    ExitCode::from(EXIT_TIMED_OUT)
                } else {
                    ExitCode::FAILURE
                };
            }
        };
        let verdict = judged(&status, wanted);
        if wait.is_none() || !waits_on(&status, wanted, verdict) {
            break (status, body, verdict);
        }
        if started.elapsed() >= timeout {
            print(&status, &body);
            eprintln!(
                "timed out after {}: {}",
                humantime::format_duration(timeout),
                verdict.text()
            );
            return ExitCode::from(EXIT_TIMED_OUT);
        }
        // What it waits for and until when, said again when that changes.
        let on = waiting_on(&status, verdict);
        if said.as_ref() != Some(&(verdict, on.clone())) {
            let until = std::time::SystemTime::now() + timeout.saturating_sub(started.elapsed());
            let until = crate::fleet::format_time(until);
            let until = until.get(11..19).unwrap_or(&until);
            eprintln!(
                "waiting until {until} UTC (--timeout {}): {}{}",
                humantime::format_duration(timeout),
                verdict.text(),
                on.as_deref()
                    .map(|on| format!(": {}", printable(on)))
                    .unwrap_or_default()
            );
            said = Some((verdict, on));
        }
        if after.is_none() {
            // A server without the long poll: ask again after POLL.
            std::thread::sleep(POLL);
        }
    };
    print(&status, &body);
    if verdict != Standing::Done {
        eprintln!("{} (exit {})", verdict.text(), verdict.code());
    }
    ExitCode::from(verdict.code())
}

/// What a wait at `verdict` waits on, in words: the first replica that keeps the fleet
/// there and why, or the first node of this replica still updating.
fn waiting_on(status: &crate::admin::Status, verdict: Standing) -> Option<String> {
    let (_, lagging) = crate::admin::standing::fleet_standing(status);
    if let Some(l) = lagging.iter().find(|l| l.standing == verdict) {
        return Some(format!("replica {}: {}", l.replica, l.why));
    }
    status
        .nodes
        .iter()
        .find(|n| {
            n.generation != status.generation
                || n.types
                    .values()
                    .any(|t| t.state == crate::fleet::SyncStatus::Stale)
        })
        .map(|n| format!("node {} on generation {}", n.node_id, n.generation))
}

/// What `--wait` waits for, beyond every node running the newest generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// This generation (or a newer one) serves every node.
    Generation(u64),
    /// The load that settled the source went to the fleet's rollout: the generation it
    /// serves as once named (`config.pending` turns false), then that one.
    Named,
}

/// Where the fleet stands for a wait on `wanted`: short of it is not done; and while the
/// load that settled the source is not yet named by the fleet's rollout, a halt or a NACK
/// is about what came before it (the rollout that names it replaces a halted one).
fn judged(status: &crate::admin::Status, wanted: Option<Target>) -> Standing {
    judged_as(verdict(status), status, wanted)
}

/// [`judged`], from `standing` (the whole fleet's, or the seen replicas').
fn judged_as(
    standing: Standing,
    status: &crate::admin::Status,
    wanted: Option<Target>,
) -> Standing {
    let unnamed =
        wanted == Some(Target::Named) && status.config.as_ref().is_some_and(|c| c.pending);
    match standing {
        Standing::Done if short_of(status, wanted) => Standing::Updating,
        Standing::RolloutStopped | Standing::Nacked if unnamed => Standing::Updating,
        standing => standing,
    }
}

/// Whether a wait on `wanted` goes on at `verdict`: while a rollout or an update is in
/// progress; and while this replica cannot follow the other replicas' summaries if what it
/// sees is done or getting there, since that settles by itself too (it follows again once
/// etcd answers it). Otherwise the wait ends with the fleet's standing.
fn waits_on(status: &crate::admin::Status, wanted: Option<Target>, verdict: Standing) -> bool {
    match verdict {
        Standing::ReplicaUnseen => {
            let seen = judged_as(seen_standing(status), status, wanted);
            seen == Standing::Done || seen.settles_by_itself()
        }
        verdict => verdict.settles_by_itself(),
    }
}

/// Whether the fleet is still short of `wanted`.
fn short_of(status: &crate::admin::Status, wanted: Option<Target>) -> bool {
    let newest = |config: &crate::admin::ConfigStatus| {
        config.pending || status.generation < config.generation
    };
    match wanted {
        None => false,
        Some(Target::Generation(generation)) => status.generation < generation,
        Some(Target::Named) => status.config.as_ref().is_none_or(newest),
    }
}

/// Why the source could not be settled.
enum Settling {
    /// The admin API does not answer (yet): ask again.
    Unreachable(anyhow::Error),
    /// Said why; exit with this code.
    Exit(ExitCode),
}

/// Settle the server's source (`POST /source/settle`): what to wait for then (nothing more
/// than the newest generation, from a server that has no barrier); a refused change, or a
/// source that does not answer, is said and exits.
async fn settle(
    target: &AdminTarget,
    token: Option<&str>,
    revision: Option<i64>,
) -> Result<Option<Target>, Settling> {
    let path = match revision {
        Some(revision) => format!("/source/settle?revision={revision}"),
        None => "/source/settle".to_string(),
    };
    let (code, body, url) = admin_call(target, token, reqwest::Method::POST, &path)
        .await
        .map_err(Settling::Unreachable)?;
    let exit = |code: u8| Err(Settling::Exit(ExitCode::from(code)));
    match code {
        reqwest::StatusCode::OK => {}
        reqwest::StatusCode::NOT_FOUND if revision.is_none() => {
            eprintln!(
                "warning: {url}: {}; waiting for the newest loaded generation",
                body.trim()
            );
            return Ok(None);
        }
        reqwest::StatusCode::SERVICE_UNAVAILABLE => {
            eprintln!("error: the source does not answer: {}", body.trim());
            return exit(EXIT_SOURCE_DOWN);
        }
        _ => {
            eprintln!("error: {url} answered {code}: {}", body.trim());
            return exit(1);
        }
    }
    let settled: crate::admin::Settled = match serde_json::from_str(&body) {
        Ok(settled) => settled,
        Err(e) => {
            eprintln!("error: {url}: not an answer this version reads: {e}");
            return exit(1);
        }
    };
    let Some(config) = settled.config else {
        return Ok(None);
    };
    if !config.ok {
        eprintln!(
            "error: the source at {} was refused; generation {} keeps serving:",
            settled.position, config.generation
        );
        for error in &config.errors {
            eprintln!("  {}", printable(error));
        }
        return exit(EXIT_LOAD_FAILED);
    }
    Ok(Some(if config.pending {
        Target::Named
    } else {
        Target::Generation(config.generation)
    }))
}

/// How often `--wait` asks.
const POLL: std::time::Duration = std::time::Duration::from_millis(500);
/// The longest one long poll of `/status` is held (the server answers at each change).
const LONG_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// The rollout part of a status, for people.
pub fn rollout_text(status: &crate::admin::Status) -> String {
    use std::fmt::Write as _;
    let mut out = fleet_text(status);
    let Some(r) = &status.rollout else {
        let _ = writeln!(
            out,
            "no rollout in progress: generation {} serves every node",
            status.generation
        );
        return out;
    };
    let _ = writeln!(
        out,
        "rollout {} since {}: generation {} to the canaries ({}), {} to every other node",
        r.state, r.since, r.candidate, r.canary, r.stable
    );
    if let Some(reason) = &r.reason {
        let _ = writeln!(out, "  halted: {}", printable(reason));
    }
    for n in &status.nodes {
        let _ = writeln!(
            out,
            "  {:<32} generation {}",
            printable(&n.node_id),
            n.generation
        );
    }
    out
}

/// The fleet's rollout kept in etcd, for people (empty without one).
fn fleet_text(status: &crate::admin::Status) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let Some(f) = &status.fleet else {
        return out;
    };
    let Some(promoted) = f.promoted else {
        let _ = writeln!(out, "fleet rollout (etcd): not read yet");
        return out;
    };
    let _ = writeln!(
        out,
        "fleet rollout (etcd): revision {promoted} promoted {} by {}",
        f.promoted_at,
        printable(&f.promoted_by)
    );
    if let (Some(candidate), Some(state)) = (f.candidate, &f.state) {
        let _ = writeln!(out, "  revision {candidate} {state} on the canaries");
    }
    if let Some(reason) = &f.reason {
        let _ = writeln!(out, "  halted: {}", printable(reason));
    }
    if let Some(aborted) = f.aborted {
        let _ = writeln!(out, "  revision {aborted} was aborted");
    }
    // Verdicts are about a candidate: without one there is nothing to say.
    for r in f.replicas.iter().filter(|_| f.candidate.is_some()) {
        let this = if r.replica == f.replica {
            " (this one)"
        } else {
            ""
        };
        let verdict = match (&r.nacked, r.current) {
            (Some(nack), true) => format!("NACK: {}", printable(nack)),
            (None, true) => format!("{} of {} canaries synced", r.synced, r.canaries),
            (_, false) => "no verdict on this candidate".to_string(),
        };
        let _ = writeln!(out, "  replica {}{this}: {verdict}", printable(&r.replica));
    }
    out
}

/// Text a proxy sent (node ids, NACK messages), made safe for a terminal: control characters
/// (escape sequences, carriage returns, newlines) are shown escaped, never acted on.
pub(super) fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// Text a proxy sent that may hold several lines (a NACK's message), each line made safe as
/// [`printable`] makes it and put on a line of its own after `indent`.
fn printable_lines(text: &str, indent: &str) -> String {
    text.trim_end()
        .split('\n')
        .map(|line| {
            format!(
                "{indent}{}",
                printable(line.strip_suffix('\r').unwrap_or(line))
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The table `switchyard status` prints: one row per node, a column per type any node asked
/// for, then the NACK texts and the last config load. What proxies sent is escaped.
pub fn status_table(status: &crate::admin::Status) -> String {
    let mut out = String::new();
    nodes_table(&mut out, status);
    node_problems(&mut out, status);
    config_lines(&mut out, status);
    replica_lines(&mut out, status);
    notices(&mut out, status);
    out
}

/// The replicas behind the view: from etcd, a line per replica, the other replicas' proxies
/// in a table, and what keeps the fleet from done; from files, that the view is this
/// replica's alone.
fn replica_lines(out: &mut String, status: &crate::admin::Status) {
    use crate::admin::replicas::ReplicaSummary;
    let Some(replicas) = &status.replicas else {
        return;
    };
    if !replicas.shared() {
        out.push_str(
            "
view: this replica's proxies only (the files are not a store replicas share; \
             ask each replica, or serve from etcd for one view)\n",
        );
        return;
    }
    let read = match (&replicas.error, replicas.stale) {
        (Some(e), true) => format!(
            "STALE: not followed since {}: {}",
            if replicas.read_at.is_empty() {
                "it started"
            } else {
                replicas.read_at.as_str()
            },
            printable(e)
        ),
        _ => "followed live".to_string(),
    };
    let (sharing, left) = replicas.sharing_and_left();
    let left = match left {
        0 => String::new(),
        n => format!(", {n} left"),
    };
    out.push_str(&format!(
        "\nreplicas ({sharing} sharing this view through etcd{left}; {read}):\n"
    ));
    let mut rows = vec![crate::admin::view::ReplicaRow::COLUMNS
        .map(String::from)
        .to_vec()];
    for row in crate::admin::view::rows(replicas) {
        rows.push(row.cells().iter().map(|c| printable(c)).collect());
    }
    aligned(out, &rows, "  ");
    let others: Vec<&ReplicaSummary> = replicas.others().collect();
    let kinds: Vec<&str> = crate::resource::ResourceType::ALL
        .iter()
        .map(|k| k.short_name())
        .filter(|k| {
            others
                .iter()
                .any(|r| r.nodes.iter().any(|n| n.types.contains_key(*k)))
        })
        .collect();
    if others.iter().any(|r| !r.nodes.is_empty()) {
        out.push_str("\nthe other replicas' proxies:\n");
        let mut rows: Vec<Vec<String>> = vec![["NODE", "CLUSTER", "REPLICA", "VERSION"]
            .iter()
            .map(|h| h.to_string())
            .chain(kinds.iter().map(|k| k.to_string()))
            .collect()];
        for r in &others {
            for n in &r.nodes {
                let mut row = vec![
                    printable(&n.node_id),
                    printable(&n.node_cluster),
                    // As last read, when this replica cannot follow the view.
                    match replicas.stale {
                        true => format!("{} (stale)", printable(&r.replica)),
                        false => printable(&r.replica),
                    },
                    match crate::admin::view::short(&n.version) {
                        "" => format!("gen {}", n.generation),
                        v => printable(v),
                    },
                ];
                row.extend(
                    kinds
                        .iter()
                        .map(|k| state_cell(n.types.get(*k).map(|t| t.state))),
                );
                rows.push(row);
            }
        }
        aligned(out, &rows, "  ");
        for r in others.iter().filter(|r| r.omitted > 0) {
            out.push_str(&format!(
                "  ... and {} more on {} (ask it for every one)\n",
                r.omitted,
                printable(&r.replica)
            ));
        }
        // Their NACKs, with the way back, as this replica's own are said.
        for r in &others {
            for n in &r.nodes {
                for (kind, t) in &n.types {
                    let Some(error) = &t.error else { continue };
                    let back = crate::admin::view::going_back(
                        &n.node_id,
                        t.last_good.as_ref(),
                        t.kept.as_ref(),
                        status.source_url(),
                    );
                    let head = format!(
                        "\nNACKED {} {kind} on {}",
                        printable(&n.node_id),
                        printable(&r.replica)
                    );
                    nack_lines(out, &head, error);
                    out.push_str(&format!("  {}\n", printable(&back)));
                }
            }
        }
    }
    for (label, why) in crate::admin::view::notes(status) {
        out.push_str(&format!("\n{}: {}\n", printable(&label), printable(&why)));
    }
}

/// A NACK under its `head`: Envoy's message for several resources is several lines, shown
/// as lines.
fn nack_lines(out: &mut String, head: &str, error: &str) {
    match error.trim_end().contains('\n') {
        false => out.push_str(&format!("{head}: {}\n", printable(error))),
        true => out.push_str(&format!("{head}:\n{}\n", printable_lines(error, "  "))),
    }
}

/// A type's cell in a table of nodes: its state, or `-` when the node did not ask for it.
fn state_cell(state: Option<crate::fleet::SyncStatus>) -> String {
    state.map_or_else(|| "-".to_string(), |s| s.name().replace('_', " "))
}

/// `rows` as columns as wide as their widest cell, each line after `indent`.
fn aligned(out: &mut String, rows: &[Vec<String>], indent: &str) {
    let widths: Vec<usize> = (0..rows.first().map_or(0, Vec::len))
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(indent);
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
}

/// One row per node: its streams, agent, generation and each type's state, in columns.
fn nodes_table(out: &mut String, status: &crate::admin::Status) {
    use crate::resource::ResourceType;
    let kinds: Vec<&str> = ResourceType::ALL
        .iter()
        .map(|k| k.short_name())
        .filter(|k| status.nodes.iter().any(|n| n.types.contains_key(*k)))
        .collect();
    let mut rows: Vec<Vec<String>> = vec![["NODE", "CLUSTER", "STREAMS", "AGENT", "GEN"]
        .iter()
        .map(|h| h.to_string())
        .chain(kinds.iter().map(|k| k.to_string()))
        .collect()];
    for n in &status.nodes {
        let streams: Vec<String> = n.streams.iter().map(|s| s.label()).collect();
        let agent = format!("{} {}", n.user_agent, n.user_agent_version)
            .trim()
            .to_string();
        let mut row = vec![
            printable(&n.node_id),
            printable(&n.node_cluster),
            printable(&streams.join(",")),
            printable(&agent),
            n.generation.to_string(),
        ];
        row.extend(
            kinds
                .iter()
                .map(|k| state_cell(n.types.get(*k).map(|t| t.state))),
        );
        rows.push(row);
    }
    aligned(out, &rows, "");
}

/// What each node has wrong or in progress: updates, unknown types, names not found,
/// oversized responses, NACKs with what they changed.
fn node_problems(out: &mut String, status: &crate::admin::Status) {
    for n in &status.nodes {
        for p in n.streams.iter().filter_map(|s| s.plan.as_ref()) {
            out.push_str(&format!(
                "\nUPDATING {}: step {} of {} since {}, waiting for the proxy's ACKs\n",
                printable(&n.node_id),
                p.step,
                p.steps,
                p.since
            ));
            if let (Some(kind), held) = (&p.nacked, p.held_back) {
                if held > 0 {
                    out.push_str(&format!(
                        "  {held} resource(s) held back: they refer to what the proxy NACKed \
                         ({kind}); they follow once it accepts a fix\n"
                    ));
                }
            }
        }
        for s in &n.streams {
            for u in &s.unknown_types {
                let names = if u.names.is_empty() {
                    "every name (wildcard)".to_string()
                } else {
                    u.names.join(", ")
                };
                out.push_str(&format!(
                    "\nUNKNOWN TYPE {} ({}): {} is not a type this server serves; answered as \
                     not existing ({})\n",
                    printable(&n.node_id),
                    s.label(),
                    printable(&u.type_url),
                    printable(&names)
                ));
            }
        }
        for (kind, t) in &n.types {
            if !t.not_found.is_empty() {
                out.push_str(&format!(
                    "\nNOT FOUND {} {kind}: subscribed, and no such resource for this node \
                     (told NOT_FOUND): {}\n",
                    printable(&n.node_id),
                    printable(&t.not_found.join(", "))
                ));
            }
            if let Some(bytes) = t.oversized_bytes {
                out.push_str(&format!(
                    "\nOVERSIZED {} {kind}: the latest response, {bytes} bytes, is over \
                     --max-response-bytes and cannot be split (a whole set, or one resource \
                     alone over it)\n",
                    printable(&n.node_id)
                ));
            }
            if let Some(error) = &t.error {
                let head = format!(
                    "\nNACKED {} {kind} (rejected version {})",
                    printable(&n.node_id),
                    t.rejected_version.as_deref().unwrap_or("?"),
                );
                nack_lines(out, &head, error);
                if !t.rejected_changes.is_empty() {
                    out.push_str("  it changed, against what the proxy runs:\n");
                    for c in &t.rejected_changes {
                        out.push_str(&format!("    {}\n", printable(&c.text())));
                    }
                }
                let back = crate::admin::view::going_back(
                    &n.node_id,
                    t.last_good.as_ref(),
                    t.kept.as_ref(),
                    status.source_url(),
                );
                out.push_str(&format!("  {}\n", printable(&back)));
            }
        }
    }
}

/// The last load, and the source it read.
fn config_lines(out: &mut String, status: &crate::admin::Status) {
    match &status.config {
        Some(c) if c.ok => {
            out.push_str(&format!(
                "\nconfig: generation {} loaded at {}, {} warning(s)\n",
                c.generation,
                c.at,
                c.warnings.len()
            ));
            if let Some(unread) = &c.unread {
                out.push_str(&format!(
                    "  the files changed after this load ({}) and are not loaded yet: the watch \
                     has them on its way, or has stopped (`switchyard status --wait` reads them \
                     now)\n",
                    printable(unread)
                ));
            }
            if files_differ_from_what_serves(status) {
                let (what, again) = match &c.source {
                    Some(s) => (
                        format!("the documents in {}", printable(&s.url)),
                        "write them",
                    ),
                    None => ("the files".to_string(), "edit them"),
                };
                out.push_str(&format!(
                    "  generation {} serves every node: the rollout of generation {} was \
                     aborted, and {what} differ from what serves ({again} to roll out \
                     again)\n",
                    status.generation, c.generation
                ));
            }
        }
        Some(c) if c.generation == 0 => {
            out.push_str(&format!(
                "\nconfig: the last load at {} FAILED, and nothing has loaded yet: no node is \
                 served until the files load:\n",
                c.at
            ));
            for e in &c.errors {
                out.push_str(&format!("  {e}\n"));
            }
        }
        Some(c) => {
            out.push_str(&format!(
                "\nconfig: the last load at {} FAILED (still serving generation {}):\n",
                c.at, c.generation
            ));
            for e in &c.errors {
                out.push_str(&format!("  {e}\n"));
            }
        }
        None => out.push_str("\nconfig: nothing loaded yet\n"),
    }
    // `--source`: where the documents come from, and whether it answers.
    if let Some(c) = &status.config {
        if let Some(source) = &c.source {
            let revision = c
                .revision
                .map(|r| format!(" at revision {r}"))
                .unwrap_or_default();
            if source.answering {
                out.push_str(&format!("source: {}{revision}\n", source.url));
            } else {
                out.push_str(&format!(
                    "source: {} does NOT answer since {} ({}); the last good generation keeps \
                     serving{revision}\n",
                    source.url,
                    source.since,
                    source.error.as_deref().unwrap_or("no answer")
                ));
            }
        }
    }
    for task in &status.tasks_down {
        out.push_str(&format!(
            "TASK DOWN: {} stopped at {} ({}; {} time(s)); started again at {}\n",
            task.task, task.since, task.cause, task.stops, task.restart_at
        ));
    }
}

/// Rollouts, streams turned away, and the certificates read from files.
fn notices(out: &mut String, status: &crate::admin::Status) {
    if status.rollout.is_some() || status.fleet.is_some() {
        out.push('\n');
        out.push_str(&rollout_text(status));
    }
    if let Some(n) = status.new_streams.as_ref().filter(|n| n.turned_away > 0) {
        out.push_str(&format!(
            "\nnew streams: {} turned away (RESOURCE_EXHAUSTED) past {} a second, {} at once \
             (--max-new-streams-per-second, --new-streams-burst)\n",
            n.turned_away, n.per_second, n.burst
        ));
    }
    if !status.certificates.is_empty() {
        out.push_str("\ncertificates read from files (switchyard_files):\n");
        for c in &status.certificates {
            let state = match c.state.as_str() {
                "ok" => String::new(),
                other => format!("  {}", other.to_uppercase()),
            };
            out.push_str(&format!(
                "  {} {}: serial {}, expires {}{state}  ({})\n",
                printable(&c.secret),
                c.role,
                c.serial,
                c.not_after,
                printable(&c.file)
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::{NodeStatus, Status, StreamStatus, TypeStatusJson};

    #[test]
    fn status_table_escapes_what_proxies_send() {
        let nasty = "bad\u{1b}[2J\r\nfake row";
        let status = Status {
            schema: crate::admin::STATUS_SCHEMA.into(),
            at: "2026-12-04T10:00:00Z".into(),
            nodes: vec![NodeStatus {
                node_id: nasty.into(),
                node_cluster: "c".into(),
                user_agent: "envoy".into(),
                user_agent_version: String::new(),
                client_features: vec![],
                generation: 1,
                group: String::new(),
                streams: vec![StreamStatus {
                    peer: "p".into(),
                    stream: "ADS".into(),
                    protocol: "sotw".into(),
                    connected_since: "t".into(),
                    plan: None,
                    polls: None,
                    last_poll: None,
                    holds_gate_until: None,
                    // P33: a client's type URL and names, escaped too.
                    unknown_types: vec![crate::fleet::UnknownTypeReport {
                        type_url: format!("type.googleapis.com/{nasty}"),
                        names: vec!["w1".into()],
                        state: crate::fleet::SyncStatus::Synced,
                    }],
                }],
                types: [(
                    "CDS".to_string(),
                    TypeStatusJson {
                        state: crate::fleet::SyncStatus::Nacked,
                        version_sent: "v2".into(),
                        version_acked: "v1".into(),
                        nonce: "1".into(),
                        error: Some(nasty.into()),
                        rejected_version: Some("v2".into()),
                        rejected_changes: vec![crate::fleet::RejectedChange {
                            resource: "clusters.yaml: clusters[0] \"x\"".into(),
                            change: "added".into(),
                            file_changed_at: Some("2026-12-01T10:00:00Z".into()),
                        }],
                        oversized_bytes: None,
                        // P32: what the node asked for and was told does not exist.
                        not_found: vec!["gone".into(), nasty.into()],
                        last_change: "t".into(),
                        last_good: None,
                        kept: None,
                    },
                )]
                .into(),
            }],
            config: None,
            rollout: None,
            generation: 1,
            server: Default::default(),
            certificates: Vec::new(),
            new_streams: None,
            fleet: None,
            history: Vec::new(),
            replicas: None,
            tasks_down: Vec::new(),
        };
        let table = status_table(&status);
        assert!(
            !table.contains('\u{1b}') && !table.contains('\r'),
            "{table:?}"
        );
        assert!(table.contains(r"bad\u{1b}[2J\r\nfake row"), "{table}");
        assert!(!table.lines().any(|l| l.starts_with("fake row")), "{table}");
        assert!(
            table.contains(
                "\n    clusters.yaml: clusters[0] \"x\" (added; the file changed at \
                 2026-12-01T10:00:00Z)\n"
            ),
            "the NACK names what it changed: {table}"
        );
        let node = r"bad\u{1b}[2J\r\nfake row";
        assert!(
            table.contains(&format!(
                "NOT FOUND {node} CDS: subscribed, and no such resource for this node (told \
                 NOT_FOUND): gone, {node}"
            )),
            "{table}"
        );
        assert!(
            table.contains(&format!(
                "UNKNOWN TYPE {node} (ADS/sotw): type.googleapis.com/{node} is not a type this \
                 server serves; answered as not existing (w1)"
            )),
            "{table}"
        );
    }

    /// A `/status` with one node `n1` at `generation` whose CDS is `state`, serving
    /// `serving`, the files at `loaded`, and `rollout` as its state (if any).
    fn fleet(
        generation: u64,
        state: &str,
        serving: u64,
        loaded: u64,
        rollout: Option<&str>,
    ) -> Status {
        let mut json = serde_json::json!({
            "nodes": [{
                "node_id": "n1", "node_cluster": "c", "user_agent": "envoy",
                "user_agent_version": "", "client_features": [], "generation": generation,
                "streams": [],
                "types": {"CDS": {"state": state, "version_sent": "v", "version_acked": "v",
                                  "nonce": "1", "last_change": "t"}}
            }],
            "config": {"ok": true, "at": "t", "generation": loaded, "errors": [], "warnings": []},
            "generation": serving
        });
        if let Some(r) = rollout {
            json["rollout"] = serde_json::json!({"state": r, "stable": serving,
                "candidate": loaded, "canary": "id canary-*", "since": "t"});
        }
        serde_json::from_value(json).expect("a status")
    }

    /// What each state of the fleet exits with.
    #[test]
    fn the_verdict_follows_the_fleet() {
        assert_eq!(verdict(&fleet(2, "SYNCED", 2, 2, None)), Standing::Done);
        assert_eq!(verdict(&fleet(1, "SYNCED", 2, 2, None)), Standing::Updating);
        assert_eq!(verdict(&fleet(2, "STALE", 2, 2, None)), Standing::Updating);
        assert_eq!(verdict(&fleet(2, "NACKED", 2, 2, None)), Standing::Nacked);
        // A node that NACKed an older generation and is not yet at the newest (published,
        // not yet sent it): updating, not NACKED (a wait goes on).
        assert_eq!(verdict(&fleet(1, "NACKED", 2, 2, None)), Standing::Updating);
        assert_eq!(
            verdict(&fleet(1, "SYNCED", 1, 2, Some("BAKING"))),
            Standing::RollingOut
        );
        assert_eq!(
            verdict(&fleet(1, "NACKED", 1, 2, Some("HALTED"))),
            Standing::RolloutStopped
        );
        assert_eq!(
            verdict(&fleet(1, "SYNCED", 1, 2, None)),
            Standing::RolloutStopped
        );
        let mut failed = fleet(2, "SYNCED", 2, 2, None);
        if let Some(c) = failed.config.as_mut() {
            c.ok = false;
        }
        assert_eq!(verdict(&failed), Standing::LoadFailed);
        // etcd away: the last good generation serves, but that is not done.
        let mut away = fleet(2, "SYNCED", 2, 2, None);
        if let Some(c) = away.config.as_mut() {
            c.source = Some(crate::admin::SourceStatus {
                url: "etcd://127.0.0.1:2379/sy".into(),
                answering: false,
                since: "t".into(),
                error: Some("cannot connect".into()),
            });
        }
        assert_eq!(verdict(&away), Standing::SourceDown);
        assert!(!Standing::SourceDown.settles_by_itself());
        assert_eq!(
            [
                Standing::Done,
                Standing::Nacked,
                Standing::LoadFailed,
                Standing::RollingOut,
                Standing::RolloutStopped,
                Standing::Updating,
                Standing::SourceDown,
                Standing::ReplicaUnseen,
            ]
            .map(Standing::code),
            [0, 2, 3, 4, 5, 7, 8, 9]
        );
        let table = status_table(&fleet(1, "SYNCED", 1, 2, None));
        assert!(
            table.contains("the rollout of generation 2 was aborted"),
            "{table}"
        );
    }

    /// A wait on a load the fleet's rollout has not named yet does not end on the halt of
    /// the rollout before it; once named, a halt ends it.
    #[test]
    fn a_halt_before_the_awaited_load_is_named_does_not_end_the_wait() {
        let mut halted = fleet(1, "SYNCED", 1, 1, None);
        halted.fleet = Some(crate::admin::FleetStatus {
            promoted: Some(3),
            candidate: Some(5),
            state: Some(crate::admin::RolloutState::Halted),
            ..Default::default()
        });
        if let Some(c) = halted.config.as_mut() {
            c.pending = true;
        }
        assert_eq!(verdict(&halted), Standing::RolloutStopped);
        assert_eq!(judged(&halted, Some(Target::Named)), Standing::Updating);
        if let Some(c) = halted.config.as_mut() {
            c.pending = false;
        }
        assert_eq!(
            judged(&halted, Some(Target::Named)),
            Standing::RolloutStopped
        );
        assert_eq!(
            judged(&fleet(1, "SYNCED", 1, 2, None), Some(Target::Generation(2))),
            Standing::RolloutStopped
        );
        assert_eq!(
            judged(&fleet(2, "SYNCED", 2, 2, None), Some(Target::Generation(3))),
            Standing::Updating
        );
    }

    /// A view this replica cannot follow (operations.md "One view of the fleet") does not
    /// end a wait while what it can see is done or getting there: it settles by itself.
    /// With a NACK among those seen, or without `--wait`, it is exit 9 at once. A replica
    /// whose lease ended (vanished) holds nothing: its proxies are judged where they are.
    #[test]
    fn a_wait_goes_on_past_a_stale_view_and_a_vanished_replica_holds_no_gate() {
        use crate::admin::replicas::{ReplicasStatus, Vanished};
        let vanished = |mut status: crate::admin::Status| {
            status.replicas = Some(ReplicasStatus {
                store: crate::admin::replicas::Store::Etcd,
                this: "a".into(),
                vanished: vec![Vanished {
                    replica: "b".into(),
                    since: "2026-12-04T09:59:50.000Z".into(),
                    proxies: 2,
                    orphaned: vec!["edge-b".into()],
                    ..Vanished::default()
                }],
                ..ReplicasStatus::default()
            });
            status
        };
        let gone = vanished(fleet(2, "SYNCED", 2, 2, None));
        assert_eq!(verdict(&gone), Standing::Done);
        let table = status_table(&gone);
        assert!(
            table.contains("REPLICA b VANISHED: its lease ended at 2026-12-04T09:59:50.000Z")
                && table.contains("edge-b"),
            "{table}"
        );
        let with_vanished = |mut status: crate::admin::Status| {
            status.replicas = Some(ReplicasStatus {
                store: crate::admin::replicas::Store::Etcd,
                this: "a".into(),
                read_at: "2026-12-04T10:00:00.000Z".into(),
                error: Some("etcd does not answer (connection refused)".into()),
                stale: true,
                ..ReplicasStatus::default()
            });
            status
        };
        let done = with_vanished(fleet(2, "SYNCED", 2, 2, None));
        assert_eq!(verdict(&done), Standing::ReplicaUnseen);
        assert_eq!(seen_standing(&done), Standing::Done);
        assert!(waits_on(&done, None, verdict(&done)));
        let updating = with_vanished(fleet(2, "SYNCED", 2, 2, None));
        let wanted = Some(Target::Generation(3));
        assert!(waits_on(&updating, wanted, judged(&updating, wanted)));
        let nacked = with_vanished(fleet(2, "NACKED", 2, 2, None));
        assert_eq!(verdict(&nacked), Standing::ReplicaUnseen);
        assert!(!waits_on(&nacked, None, verdict(&nacked)));
        // Every other standing waits as it did.
        let plain = fleet(2, "SYNCED", 1, 2, None);
        assert_eq!(
            waits_on(&plain, None, verdict(&plain)),
            verdict(&plain).settles_by_itself()
        );
    }

    /// After an abort, what differs from what serves is named by the source's kind.
    #[test]
    fn an_aborted_rollout_names_the_source_that_differs() {
        let mut status = fleet(1, "SYNCED", 1, 2, None);
        assert!(status_table(&status).contains("and the files differ from what serves (edit them"));
        if let Some(c) = status.config.as_mut() {
            c.source = Some(crate::admin::SourceStatus {
                url: "etcd://127.0.0.1:2379/sy".into(),
                answering: true,
                since: "t".into(),
                error: None,
            });
        }
        let table = status_table(&status);
        assert!(
            table.contains(
                "and the documents in etcd://127.0.0.1:2379/sy differ from what serves (write \
                 them to roll out again)"
            ),
            "{table}"
        );
    }

    /// Envoy's NACK of several resources comes as several lines: the table shows them as
    /// lines, each indented, never as a literal `\n`.
    #[test]
    fn a_nack_of_several_lines_is_shown_as_lines() {
        let mut status = fleet(2, "NACKED", 2, 2, None);
        if let Some(cds) = status.nodes[0].types.get_mut("CDS") {
            cds.error = Some("Error adding/updating cluster(s) a: bad\nb: worse\n".into());
        }
        let table = status_table(&status);
        assert!(
            table.contains(
                "NACKED n1 CDS (rejected version ?):\n  Error adding/updating cluster(s) a: \
                 bad\n  b: worse\n"
            ),
            "{table}"
        );
        assert!(!table.contains("\\n"), "{table}");
    }

    /// One view of the fleet (operations.md): a replica stopped by SIGTERM is shown as
    /// having left, whatever it last said of its proxies, and is not counted as sharing.
    #[test]
    fn a_replica_that_left_is_shown_as_left() {
        use crate::admin::replicas::{ReplicaSummary, ReplicasStatus};
        let mut status = fleet(2, "SYNCED", 2, 2, None);
        let replica = |name: &str, left: bool| ReplicaSummary {
            replica: name.into(),
            at: "2026-12-04T10:00:00.000Z".into(),
            standing: Standing::Done,
            generation: 2,
            config_ok: true,
            proxies: 3,
            synced: 3,
            left,
            ..ReplicaSummary::default()
        };
        status.replicas = Some(ReplicasStatus {
            store: crate::admin::replicas::Store::Etcd,
            this: "a".into(),
            read_at: "2026-12-04T10:00:01.000Z".into(),
            replicas: vec![replica("a", false), replica("b", true)],
            ..ReplicasStatus::default()
        });
        let table = status_table(&status);
        assert!(
            table.contains("replicas (1 sharing this view through etcd, 1 left; followed live)"),
            "{table}"
        );
        let b = table
            .lines()
            .find(|l| l.trim_start().starts_with("b "))
            .unwrap_or_default();
        assert!(
            b.split_whitespace().nth(2) == Some("LEFT"),
            "{b:?} in {table}"
        );
        let a = table
            .lines()
            .find(|l| l.contains("a (this one)"))
            .unwrap_or_default();
        assert!(a.contains("DONE"), "{a:?} in {table}");
    }

    /// What `--wait` waits for beyond the newest generation: the one that holds the
    /// settled source, or (the fleet's rollout) the one it is named once served.
    #[test]
    fn the_wait_is_short_of_a_generation_until_it_serves_every_node() {
        let done = fleet(2, "SYNCED", 2, 2, None);
        assert!(!short_of(&done, None));
        assert!(!short_of(&done, Some(Target::Generation(2))));
        assert!(short_of(&done, Some(Target::Generation(3))));
        assert!(!short_of(&done, Some(Target::Named)));
        let mut pending = done.clone();
        if let Some(c) = pending.config.as_mut() {
            c.pending = true;
        }
        assert!(short_of(&pending, Some(Target::Named)));
        let named_newer = fleet(2, "SYNCED", 2, 3, None);
        assert!(short_of(&named_newer, Some(Target::Named)));
    }
}
