//! `switchyard apply DIR --source etcd://...` and `switchyard export --source ... DIR`: the
//! snapshot files of a directory written to an etcd prefix in one guarded transaction, and
//! back.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::flags::{AdminArgs, DescriptorArgs, EtcdArgs};
use super::{runtime, EXIT_USAGE};
use crate::config::{self, Document, LoadOptions};
use crate::source::etcd::{self, ApplyError, Change};
use crate::source::EtcdUrl;

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The directory of snapshot files to write (its *.yaml, *.yml and *.json files at any
    /// depth, hidden entries skipped, as `serve --config` reads them); each goes to the key
    /// `PREFIX/<its path under DIR>`, and keys under the prefix with no file are deleted.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub write: WriteFlags,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The etcd revision whose documents to write back (`validate --source` and `apply`
    /// print revisions; etcd keeps them back to its last compaction).
    #[arg(value_name = "REVISION")]
    pub revision: i64,
    /// For emergencies: with the fleet's rollout (serve --canary-id/--canary-cluster), every
    /// node gets the rollback at once, skipping the canaries and the bake (a rollout in
    /// progress ends with it). Recorded as such in history. Without canaries every change
    /// goes to every node at once anyway.
    #[arg(long)]
    pub now: bool,
    #[command(flatten)]
    pub write: WriteFlags,
}

/// Where and how `apply` and `rollback` write, and how they check what they write (as
/// `serve` would load it).
#[derive(Debug, Args)]
pub struct WriteFlags {
    /// Where: `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`.
    #[arg(long, value_name = "URL")]
    pub source: String,
    /// Check and show the change; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Refuse, writing nothing, when a key under the prefix was written after this revision
    /// (the one `validate --source`, `export` or the last `apply` printed): two people
    /// applying at once never overwrite what the other wrote unseen. Deletions made
    /// outside `apply` alone are not seen.
    #[arg(long, value_name = "REVISION")]
    pub expect_revision: Option<i64>,
    /// Why: recorded with the change (`history --source` shows it).
    #[arg(long, value_name = "TEXT")]
    pub message: Option<String>,
    /// Who: recorded with the change (by default the environment's SWITCHYARD_AUTHOR, else
    /// USER, else LOGNAME, else the name of the user the process runs as).
    #[arg(long, value_name = "NAME", env = "SWITCHYARD_AUTHOR")]
    pub author: Option<String>,
    /// How long the write may take in all: connecting, finishing an interrupted apply,
    /// reading, staging and writing share this one deadline.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub source_timeout: Duration,
    /// As `serve --strict`.
    #[arg(long)]
    pub strict: bool,
    /// As `serve --skip-envoy-rules`.
    #[arg(long)]
    pub skip_envoy_rules: bool,
    /// As `serve --re2-max-program-size`.
    #[arg(long, value_name = "N", default_value_t = crate::config::checks::re2::DEFAULT_MAX_PROGRAM_SIZE)]
    pub re2_max_program_size: u64,
    #[command(flatten)]
    pub descriptors: DescriptorArgs,
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// After writing, wait until the fleet serves what was written, as `status --wait
    /// --revision R` does with the server at --admin-addr (from etcd, every replica's view),
    /// and exit as it does. With nothing to write, wait for what etcd holds.
    #[arg(long, conflicts_with = "dry_run")]
    pub wait: bool,
    /// With --wait: how long to wait at most (then exit 6). An admin API that does not
    /// answer for 10 s after the write exits 10: applied, but the fleet cannot be watched.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = humantime::parse_duration, requires = "wait")]
    pub wait_timeout: Duration,
    /// List every document and resource the change touches; without it, past 20 of a kind
    /// the first 20 and how many more.
    #[arg(long, short = 'v')]
    pub verbose: bool,
    #[command(flatten)]
    pub admin: AdminArgs,
}

impl WriteFlags {
    /// Who writes: `--author`, SWITCHYARD_AUTHOR, USER, LOGNAME, then the process owner's
    /// name (`/etc/passwd`); the first that is not empty.
    fn author(&self) -> Option<String> {
        let env = |name: &str| std::env::var(name).ok();
        [self.author.clone(), env("USER"), env("LOGNAME")]
            .into_iter()
            .flatten()
            .chain(std::iter::once_with(process_owner).flatten())
            .map(|a| a.trim().to_string())
            .find(|a| !a.is_empty())
    }

    fn check(&self) -> LoadOptions {
        LoadOptions {
            strict: self.strict,
            envoy_rules: !self.skip_envoy_rules,
            re2_max_program_size: self.re2_max_program_size,
            ..LoadOptions::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// What changed in etcd, by revision: `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`.
    /// Without it: what the server at --admin-addr published, with how many nodes ACKed and
    /// NACKed each generation.
    #[arg(long, value_name = "URL")]
    pub source: Option<String>,
    #[command(flatten)]
    pub admin: super::flags::AdminArgs,
    /// How many changes to show, newest first.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub limit: usize,
    /// How long connecting and reading may take, each.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub source_timeout: Duration,
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// List every document, file and resource of each change; without it, past 20 of a
    /// kind the first 20 and how many more.
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Where to read: `etcd://HOST:PORT[,HOST:PORT...]/PREFIX`.
    #[arg(long, value_name = "URL")]
    pub source: String,
    /// The directory to write each document into, at its path under the prefix; it must be
    /// empty or not exist.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// How long connecting and reading may take, each.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    pub source_timeout: Duration,
    #[command(flatten)]
    pub etcd: EtcdArgs,
}

/// The URL and access the flags give, or the usage error said.
fn reach(source: &str, etcd: &EtcdArgs) -> Result<(EtcdUrl, etcd::Access), ExitCode> {
    let usage = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(EXIT_USAGE)
    };
    let url = source
        .parse::<EtcdUrl>()
        .map_err(|e| usage(e.to_string()))?;
    let access = etcd.access().map_err(|e| usage(e.to_string()))?;
    Ok((url, access))
}

/// DIR's snapshot files as documents, each with the key it goes to.
fn documents_of(dir: &Path, url: &EtcdUrl) -> Result<Vec<(String, Document)>, String> {
    let files = config::snapshot_files(dir).map_err(|e| e.to_string())?;
    let mut documents = Vec::new();
    for path in files {
        let relative = path.strip_prefix(dir).unwrap_or(&path);
        let parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let key = format!("{}{}", url.key_prefix(), parts.join("/"));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        documents.push((key, Document::text(path.display().to_string(), text)));
    }
    Ok(documents)
}

pub(super) fn run_apply(args: &ApplyArgs) -> ExitCode {
    let (url, access) = match reach(&args.write.source, &args.write.etcd) {
        Ok(reached) => reached,
        Err(code) => return code,
    };
    if !args.dir.is_dir() {
        eprintln!("error: {}: not a directory", args.dir.display());
        return ExitCode::from(EXIT_USAGE);
    }
    let local = match documents_of(&args.dir, &url) {
        Ok(local) => local,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    write_documents(&url, &access, &local, &args.write, None)
}

/// `history` without `--source`: the generations a running server published.
fn server_history(args: &HistoryArgs) -> ExitCode {
    let (target, token) = match super::admin_api::admin_target(&args.admin) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let Ok(rt) = runtime(tokio::runtime::Builder::new_current_thread()) else {
        return ExitCode::FAILURE;
    };
    let status = match rt.block_on(super::admin_api::fetch_status(&target, token.as_deref())) {
        Ok((status, _)) => status,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    print!(
        "{}",
        history_text(&status.history, args.limit, args.verbose)
    );
    ExitCode::SUCCESS
}

/// A server's history, for people.
pub fn history_text(entries: &[crate::history::Entry], limit: usize, verbose: bool) -> String {
    let mut out = String::new();
    for e in entries.iter().take(limit) {
        let revision = e
            .revision
            .map(|r| format!(", etcd revision {r}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "generation {} published {}{revision}: {} node(s) ACKed, {} NACKed\n",
            e.generation, e.at, e.acked, e.nacked
        ));
        if e.author.is_some() || e.message.is_some() || e.rollback.is_some() {
            out.push_str(&format!(
                "  written{}{}\n",
                by_whom(e.author.as_deref(), e.message.as_deref()),
                rolled_back(e.rollback, e.now)
            ));
        }
        let mut files = e.files.clone();
        files.sort();
        files.dedup();
        out.push_str(&crate::diff::capped(&files, verbose, "  "));
        let [added, changed, removed] = e.counts;
        for (sign, names, count) in [
            ("+", &e.added, added),
            ("~", &e.changed, changed),
            ("-", &e.removed, removed),
        ] {
            // The entry keeps the first names of a kind and counts them all.
            let mut names: Vec<&String> = names.iter().collect();
            names.sort();
            let shown = if verbose {
                names.len()
            } else {
                crate::diff::LIST_LIMIT
            };
            for name in names.iter().take(shown) {
                out.push_str(&format!("    {sign} {name}\n"));
            }
            let shown = shown.min(names.len());
            if count > shown {
                let hint = if names.len() > shown {
                    " (--verbose lists more)"
                } else {
                    ""
                };
                out.push_str(&format!("    {sign} ... {} more{hint}\n", count - shown));
            }
        }
    }
    if entries.is_empty() {
        out.push_str("no generation published yet\n");
    }
    out
}

/// `rollback REVISION`: the documents the prefix held at that revision, written back as a
/// new change through apply's checks and guard.
pub(super) fn run_rollback(args: &RollbackArgs) -> ExitCode {
    let (url, access) = match reach(&args.write.source, &args.write.etcd) {
        Ok(reached) => reached,
        Err(code) => return code,
    };
    let Ok(rt) = runtime(tokio::runtime::Builder::new_current_thread()) else {
        return ExitCode::FAILURE;
    };
    let timeout = args.write.source_timeout;
    let then = rt
        .block_on(etcd::connect_and_read(
            &url,
            &access,
            Some(args.revision),
            timeout,
        ))
        .map(|(_, snapshot)| snapshot);
    let then = match then {
        Ok(then) => then,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "rolling back to the {} document(s) the prefix held at revision {}:",
        then.documents.len(),
        args.revision
    );
    let local: Vec<(String, Document)> = then
        .documents
        .into_iter()
        .map(|d| {
            let key = d.name.trim_start_matches("etcd:").to_string();
            let name = format!("{}@{}", d.name, args.revision);
            (
                key,
                Document {
                    name,
                    content: d.content,
                },
            )
        })
        .collect();
    write_documents(
        &url,
        &access,
        &local,
        &args.write,
        Some((args.revision, args.now)),
    )
}

/// Check `local` (each document with its key) as serve would load it, show the change
/// against what etcd holds, and write it in one guarded transaction (unless `dry_run`);
/// `rollback` is the revision written back and whether `--now`. With `--wait`, then wait
/// for the fleet to serve it.
fn write_documents(
    url: &EtcdUrl,
    access: &etcd::Access,
    local: &[(String, Document)],
    flags: &WriteFlags,
    rollback: Option<(i64, bool)>,
) -> ExitCode {
    let code = write_change(url, access, local, flags, rollback);
    match code {
        Ok(landed) if flags.wait => super::status::watch(
            &flags.admin,
            super::status::Output::Table,
            Some(super::status::Wait {
                generation: None,
                revision: landed,
                timeout: flags.wait_timeout,
                written: landed,
            }),
        ),
        Ok(_) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// [`write_documents`] up to the write: the revision it landed at (`None`: nothing was
/// written), or the exit code of a failure said.
fn write_change(
    url: &EtcdUrl,
    access: &etcd::Access,
    local: &[(String, Document)],
    flags: &WriteFlags,
    rollback: Option<(i64, bool)>,
) -> Result<Option<i64>, ExitCode> {
    let (options, dry_run, timeout) = (&flags.check(), flags.dry_run, flags.source_timeout);
    let url = url.clone();
    // Checked exactly as serve would load them: an invalid change writes nothing.
    let documents: Vec<Document> = local.iter().map(|(_, d)| d.clone()).collect();
    let new = match config::load_documents(&documents, options) {
        Ok(new) => new,
        Err(failure) => {
            for e in &failure.errors {
                eprintln!("error: {e}");
            }
            eprintln!(
                "invalid: {} error(s); nothing written",
                failure.errors.len()
            );
            return Err(ExitCode::FAILURE);
        }
    };
    let Ok(rt) = runtime(tokio::runtime::Builder::new_current_thread()) else {
        return Err(ExitCode::FAILURE);
    };
    let outcome = rt.block_on(async {
        // One deadline for the whole apply, every step within it (--source-timeout): the
        // connect, an interrupted apply finished, the read, the write.
        let deadline = tokio::time::Instant::now() + timeout;
        let late = || {
            ApplyError::Unavailable(crate::source::SourceError::Unavailable {
                url: url.display(),
                message: format!(
                    "no answer within --source-timeout {}",
                    humantime::format_duration(timeout)
                ),
            })
        };
        let mut client = tokio::time::timeout_at(deadline, etcd::connect(&url, access, timeout))
            .await
            .map_err(|_| late())??;
        // An apply in several transactions that was interrupted is finished first (readers
        // hold the documents before it until then).
        if !dry_run {
            if let Some(ended) = etcd::switch::resume(&mut client, &url, deadline).await? {
                println!(
                    "finished the switch of the prefix an interrupted apply began: its change \
                     landed at revision {ended}"
                );
            }
        }
        let (held, mut at) = etcd::read_for_write(&mut client, &url, deadline).await?;
        if let Some(expected) = flags.expect_revision {
            let last = tokio::time::timeout_at(deadline, etcd::last_write(&mut client, &url))
                .await
                .map_err(|_| late())??;
            if last > expected {
                return Err(ApplyError::Moved { expected, last });
            }
            // The write's guard compares against the revision expected.
            at.revision = at.revision.min(expected);
        }
        // What changes, by key.
        let current = by_name(&held.documents);
        let mut change = Change::default();
        let wanted: std::collections::BTreeMap<String, &Document> = local
            .iter()
            .map(|(key, document)| (key.clone(), document))
            .collect();
        let wanted_bytes = by_key_bytes(&wanted);
        let changes = by_key(&current, &wanted_bytes);
        for (key, what) in &changes {
            match (*what, wanted.get(*key)) {
                ("delete", _) | (_, None) => change.delete.push(key.to_string()),
                // Text: every document written loaded above.
                (_, Some(document)) => change.put.push((
                    key.to_string(),
                    String::from_utf8_lossy(document.bytes()).into_owned(),
                )),
            }
        }
        // Sorted; past 20 summarized (`--verbose` lists every one).
        let lines = document_lines(&changes);
        print!("{}", crate::diff::capped(&lines, flags.verbose, "  "));
        match config::load_documents(&held.documents, options) {
            Ok(old) => print!("{}", crate::diff::diff(&old, &new).text(flags.verbose)),
            Err(failure) => eprintln!(
                "note: what etcd holds at revision {} does not load ({} error(s)): the change \
                 is shown by document only",
                held.revision,
                failure.errors.len()
            ),
        }
        if change.is_empty() {
            println!(
                "nothing to apply: etcd holds these documents at revision {}",
                at.revision
            );
            return Ok(None);
        }
        if dry_run {
            println!(
                "dry run: nothing written (etcd at revision {})",
                at.revision
            );
            return Ok(None);
        }
        let now = std::time::SystemTime::now();
        let author = flags.author();
        let note = etcd::ApplyNote {
            read_at: Some(at.revision),
            documents: Some(local.len()),
            at: humantime::format_rfc3339_seconds(now).to_string(),
            author: author.clone(),
            message: flags.message.clone(),
            rollback: rollback.map(|(revision, _)| revision),
            now: rollback.is_some_and(|(_, now)| now),
            nonce: format!(
                "{}-{}",
                std::process::id(),
                now.duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            ),
        }
        .text();
        let landed = etcd::apply(&mut client, &url, &change, at, &note, deadline).await?;
        Ok::<_, ApplyError>(Some((at.revision, landed, author)))
    });
    match outcome {
        Ok(Some((read, landed, author))) => {
            println!(
                "applied at revision {landed} (read at revision {read}){}",
                by_whom(author.as_deref(), flags.message.as_deref())
            );
            Ok(Some(landed))
        }
        Ok(None) => Ok(None),
        Err(e) => {
            eprintln!("error: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

pub(super) fn run_export(args: &ExportArgs) -> ExitCode {
    let (url, access) = match reach(&args.source, &args.etcd) {
        Ok(reached) => reached,
        Err(code) => return code,
    };
    if std::fs::read_dir(&args.dir).is_ok_and(|mut entries| entries.next().is_some()) {
        eprintln!(
            "error: {}: not empty; export writes into an empty (or new) directory",
            args.dir.display()
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let Ok(rt) = runtime(tokio::runtime::Builder::new_current_thread()) else {
        return ExitCode::FAILURE;
    };
    let timeout = args.source_timeout;
    let held = rt
        .block_on(etcd::connect_and_read(&url, &access, None, timeout))
        .map(|(_, snapshot)| snapshot);
    let held = match held {
        Ok(held) => held,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let prefix = url.key_prefix();
    for document in &held.documents {
        let key = document.name.trim_start_matches("etcd:");
        let relative = key.strip_prefix(prefix.as_str()).unwrap_or(key);
        // Only plain relative paths: no `..`, no root.
        let safe = !relative.is_empty()
            && relative
                .split('/')
                .all(|part| !part.is_empty() && part != ".." && part != ".");
        if !safe {
            eprintln!(
                "error: the key {key:?} is not a path under the directory; nothing more written"
            );
            return ExitCode::FAILURE;
        }
        let path = args.dir.join(relative);
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, document.bytes()));
        if let Err(e) = written {
            eprintln!("error: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    println!(
        "exported {} document(s) at etcd revision {}",
        held.documents.len(),
        held.revision
    );
    ExitCode::SUCCESS
}

/// `history`: the revisions at which the prefix's documents changed, newest first, each with
/// what changed (by document, and by resource as `diff` shows it) and, for an apply, when.
pub(super) fn run_history(args: &HistoryArgs) -> ExitCode {
    let Some(source) = &args.source else {
        return server_history(args);
    };
    let (url, access) = match reach(source, &args.etcd) {
        Ok(reached) => reached,
        Err(code) => return code,
    };
    let Ok(rt) = runtime(tokio::runtime::Builder::new_current_thread()) else {
        return ExitCode::FAILURE;
    };
    let timeout = args.source_timeout;
    let options = LoadOptions::default();
    let shown = rt.block_on(async {
        let mut client = etcd::connect(&url, &access, timeout).await?;
        let (revisions, oldest) = etcd::changes(&mut client, &url, timeout).await?;
        let mut out = String::new();
        for &revision in revisions.iter().rev().take(args.limit) {
            let now = etcd::read_at(&mut client, &url, Some(revision)).await?;
            let before = if revision > oldest.max(1) {
                Some(etcd::read_at(&mut client, &url, Some(revision - 1)).await?)
            } else {
                None
            };
            let applied = applied_at(&mut client, &url, revision).await;
            out.push_str(&format!(
                "revision {revision}{}\n",
                applied
                    .map(|a| format!(
                        ", applied at {}{}{}",
                        a.at,
                        by_whom(a.author.as_deref(), a.message.as_deref()),
                        rolled_back(a.rollback, a.now)
                    ))
                    .unwrap_or_default()
            ));
            let after_texts = by_name(&now.documents);
            let before_texts = before
                .as_ref()
                .map(|b| by_name(&b.documents))
                .unwrap_or_default();
            let lines = document_lines(&by_key(&before_texts, &after_texts));
            out.push_str(&crate::diff::capped(&lines, args.verbose, "  "));
            let old = match &before {
                Some(before) => config::load_documents(&before.documents, &options).ok(),
                None => None,
            };
            match (old, config::load_documents(&now.documents, &options)) {
                (Some(old), Ok(new)) => {
                    for line in crate::diff::diff(&old, &new).text(args.verbose).lines() {
                        out.push_str(&format!("    {line}\n"));
                    }
                }
                (_, Err(failure)) => out.push_str(&format!(
                    "    (these documents do not load: {} error(s); a replica kept serving the \
                     generation before)\n",
                    failure.errors.len()
                )),
                (None, Ok(_)) => {}
            }
        }
        out.push_str(&format!(
            "history: {} change(s) since revision {oldest} (the oldest etcd keeps), the last {} shown\n",
            revisions.len(),
            revisions.len().min(args.limit)
        ));
        Ok::<_, crate::source::SourceError>(out)
    });
    match shown {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Documents read from etcd by key (their names without `etcd:`), with their bytes (a value
/// that is not text is a document too: one an apply replaces or deletes).
fn by_name(documents: &[Document]) -> std::collections::BTreeMap<String, &[u8]> {
    documents
        .iter()
        .map(|d| (d.name.trim_start_matches("etcd:").to_string(), d.bytes()))
        .collect()
}

/// Documents by key, with their bytes.
fn by_key_bytes<'a>(
    documents: &std::collections::BTreeMap<String, &'a Document>,
) -> std::collections::BTreeMap<String, &'a [u8]> {
    documents
        .iter()
        .map(|(key, d)| (key.clone(), d.bytes()))
        .collect()
}

/// What changes from `before` to `after`, documents by key: each key added, changed or
/// deleted (`add`, `change`, `delete`), in key order.
fn by_key<'a>(
    before: &'a std::collections::BTreeMap<String, &[u8]>,
    after: &'a std::collections::BTreeMap<String, &[u8]>,
) -> Vec<(&'a str, &'static str)> {
    let mut out: Vec<(&str, &str)> = after
        .iter()
        .filter_map(|(key, text)| match before.get(key) {
            None => Some((key.as_str(), "add")),
            Some(old) if old != text => Some((key.as_str(), "change")),
            Some(_) => None,
        })
        .chain(
            before
                .keys()
                .filter(|key| !after.contains_key(*key))
                .map(|key| (key.as_str(), "delete")),
        )
        .collect();
    out.sort();
    out
}

/// [`by_key`]'s changes as lines: `add    KEY`, `change KEY`, `delete KEY`.
fn document_lines(changes: &[(&str, &str)]) -> Vec<String> {
    changes
        .iter()
        .map(|(key, what)| format!("{what:<6} {key}"))
        .collect()
}

/// Who wrote a change and why, for a terminal: ` by alice: slower connects`.
fn by_whom(author: Option<&str>, message: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(author) = author {
        out.push_str(&format!(" by {}", super::status::printable(author)));
    }
    if let Some(message) = message {
        out.push_str(&format!(": {}", super::status::printable(message)));
    }
    out
}

/// What a rollback said of itself, for a terminal: ` (rollback to revision 12, --now: no
/// canary, no bake)`.
fn rolled_back(rollback: Option<i64>, now: bool) -> String {
    match (rollback, now) {
        (Some(r), true) => {
            format!(" (rollback to revision {r}, --now: every node at once, no canary, no bake)")
        }
        (Some(r), false) => format!(" (rollback to revision {r})"),
        (None, _) => String::new(),
    }
}

/// What an apply that landed at `revision` said of itself (its guard key's note), if one did.
async fn applied_at(
    client: &mut switchyard_etcd::Client,
    url: &EtcdUrl,
    revision: i64,
) -> Option<etcd::ApplyNote> {
    let response = client
        .get(
            etcd::keys::guard(url),
            Some(switchyard_etcd::GetOptions::new().with_revision(revision)),
        )
        .await
        .ok()?;
    let kv = response.kvs().first()?;
    if kv.mod_revision() != revision {
        return None;
    }
    serde_json::from_slice(kv.value()).ok()
}

/// The name of the user this process runs as, from `/etc/passwd` (`None` when it is not
/// listed there, as in a container run under an arbitrary uid).
fn process_owner() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}
