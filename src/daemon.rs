//! The daemon as one library call: read the source and load it, then serve xDS and the
//! admin API on the listeners given until shutdown, with the source followed, the rollout
//! driver and the state directory wired in. `switchyard serve` and every in-process test start the same way.
//!
//! Owns: the order things start and stop in, and which part gets which handle (cache,
//! fleet, reloader, publisher, telemetry). Must not: parse flags or read the process's environment (the
//! CLI does), or hold protocol or serving logic (`protocol`, `server`, `admin`).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::admin::{self, Admin};
use crate::cache::Cache;
use crate::config::{LoadFailure, LoadOptions};
use crate::fleet::Fleet;
use crate::publish::{Publication, Publisher, Reloader};
use crate::resource::Secrets;
use crate::rollout::fleetwide::driver::{self as fleet_rollout, FleetRollout, FleetStart};
use crate::rollout::Policy;
use crate::server::{self, ServeOptions, ServerError};
use crate::sharing::{self, Sharing};
use crate::source::{etcd, Barrier, Documents, Following, Sink, Source, SourceError};
use crate::state::{StateDir, StateError};
use crate::telemetry::Telemetry;

/// Everything the daemon is told, beyond its listeners.
#[derive(Debug, Default)]
pub struct Options {
    /// Where the documents come from (`--config` files, or an etcd prefix with `--source`).
    pub source: Source,
    pub load: LoadOptions,
    pub serve: ServeOptions,
    /// How the admin port is served (TLS, header timeout).
    pub admin: admin::Transport,
    /// `--admin-token-file`'s token: what shows nodes and configuration needs it.
    pub admin_token: Option<Arc<str>>,
    /// Follow the source (`serve` always does; tests that reload by hand don't).
    pub watch: bool,
    /// `--canary-id`/`--canary-cluster` and `--rollout-bake`: staged rollouts (from etcd,
    /// the fleet's rollout, kept in etcd beside the documents).
    pub rollout: Option<Policy>,
    /// `--state-dir`: where each good (or promoted) load is kept, and served from at start
    /// when the files do not load.
    pub state_dir: Option<PathBuf>,
    /// `--keep-generations`: how many generations the cache keeps (0: the default).
    pub keep_generations: usize,
    /// `--preflight-envoy` and `--preflight-timeout`: the Envoy that checks each new config.
    pub preflight: Option<(PathBuf, Duration)>,
    /// `--replica-name`: this replica's name in the fleet's view and verdicts (from etcd);
    /// by default its host name.
    pub replica: Option<String>,
    /// `--file-quiet-time`: how long the files must be quiet before a change loads.
    pub file_quiet: crate::source::files::QuietTime,
}

/// The two ports, bound by the caller.
#[derive(Debug)]
pub struct Listeners {
    pub xds: TcpListener,
    pub admin: TcpListener,
}

/// Why the daemon did not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot use --state-dir: {0}")]
    StateDir(#[from] StateError),
    #[error("--preflight-envoy {}: no such file", .0.display())]
    NoEnvoy(PathBuf),
    #[error("the configuration cannot be loaded, not starting: {0}")]
    Load(LoadFailure),
    #[error("{0}; not starting")]
    Source(#[from] SourceError),
    #[error("the fleet's rollout in etcd cannot be followed, not starting: the promoted generation (revision {revision}) does not load here: {failure}")]
    PromotedDoesNotLoad { revision: i64, failure: LoadFailure },
    #[error("the fleet's rollout in etcd cannot be followed, not starting: the copy of the promoted generation (revision {revision}) is not what was promoted")]
    PromotedCopyDiffers { revision: i64 },
    #[error(transparent)]
    Server(#[from] ServerError),
    /// A task the daemon cannot do without (the xDS server, the admin server) stopped.
    #[error("the {task} server stopped ({cause}); the process ends for its orchestrator to start it again")]
    Ended { task: String, cause: String },
}

impl RunError {
    /// Whether the operator's input is at fault (a usage error) rather than the run.
    pub fn is_usage(&self) -> bool {
        !matches!(self, RunError::Server(_) | RunError::Ended { .. })
    }
}

/// The fleet's rollout driver, ready to run.
struct FleetDriver {
    driver: fleet_rollout::Driver,
    inbox: Arc<tokio::sync::Mutex<fleet_rollout::Inbox>>,
    start: crate::rollout::fleetwide::store::Held,
    handle: FleetRollout,
}

/// A daemon whose configuration is loaded, not yet serving. Its parts are public for the
/// callers that look inside: tests reload by hand and read the cache.
pub struct Daemon {
    pub cache: Arc<Cache>,
    pub fleet: Arc<Fleet>,
    pub reloader: Arc<Reloader>,
    /// Publishes good loads (with the fleet's rollout, what the rollout names).
    pub publisher: Arc<Publisher>,
    pub telemetry: Telemetry,
    /// Whether the source answers (from files, never said).
    health: crate::source::Health,
    /// The source, followed from its first read once serving.
    following: Option<Following>,
    /// The source's barrier, for the admin API (`POST /source/settle`); none for an etcd
    /// prefix that is not followed.
    barrier: Option<Barrier>,
    /// `--source` with a rollout policy: the driver of the fleet's rollout, its inputs, and
    /// the admin API's handle on it.
    fleet_driver: Option<FleetDriver>,
    /// With an etcd source: this replica's summary shared beside the prefix, and every
    /// replica's read back (the fleet's view).
    sharing: Option<Sharing>,
    serve: ServeOptions,
    admin: admin::Transport,
    admin_token: Option<Arc<str>>,
}

impl Daemon {
    /// Read the source and load it, as `serve` does before it binds. From files: the watch
    /// is armed first (an edit made during a long first load is not lost); under a rollout
    /// policy the last promoted copy in the state directory serves first; a config that
    /// does not load is an error unless the state directory keeps a good copy to serve
    /// meanwhile. From etcd: the prefix is read at one revision (with a rollout policy, the
    /// fleet's rollout beside it, whose promoted generation serves first); a source that
    /// does not answer, or a first read that does not load, is an error.
    pub async fn load(mut options: Options) -> Result<Daemon, RunError> {
        let first = match &options.source {
            Source::Files(_) => None,
            Source::Etcd(prefix) => Some(read_etcd(prefix, options.rollout.is_some()).await?),
        };
        let telemetry = Telemetry::default();
        let health = crate::source::Health::new();
        let replica = options
            .replica
            .take()
            .unwrap_or_else(fleet_rollout::default_replica_name);
        let fleetwide = first.as_ref().is_some_and(|f| f.fleet.is_some());
        let fleet_of_nodes = Arc::new({
            let telemetry = telemetry.clone();
            Fleet::new(move |took| telemetry.converged(took))
        });
        let keep = match options.keep_generations {
            0 => crate::cache::DEFAULT_KEPT,
            n => n,
        };
        let cache = Arc::new(
            match options.rollout.take() {
                Some(mut policy) => {
                    policy.fleetwide = fleetwide;
                    Cache::with_rollouts(policy)
                }
                None => Cache::new(),
            }
            .keeping(keep),
        );
        let paths = options.source.paths().to_vec();
        let mut publisher = Publisher::new(
            Arc::clone(&cache),
            telemetry.clone(),
            paths.clone(),
            options.load.clone(),
        );
        if let Some(dir) = &options.state_dir {
            publisher = publisher.with_state(StateDir::open(dir)?);
        }
        let publisher = Arc::new(publisher.counting(Arc::clone(&fleet_of_nodes)));
        let mut reloader = Reloader::new(
            paths,
            options.load.clone(),
            Arc::clone(&cache),
            telemetry.clone(),
        );
        if let Some((envoy, timeout)) = options.preflight {
            if !envoy.is_file() {
                return Err(RunError::NoEnvoy(envoy));
            }
            // What the nodes that may get inline key material are sent: every node with
            // --insecure-serve-secrets, the bound ones with --node-identity (in such a fleet,
            // every proxy); otherwise none gets it.
            let secrets = if options.serve.identity.is_some() {
                Secrets::Serve
            } else {
                options.serve.secrets
            };
            reloader = reloader.with_preflight(envoy, timeout, secrets);
        }
        // With the fleet's rollout, it alone publishes: the sink hands it good loads.
        let mut heads = None;
        if fleetwide {
            let slot = Arc::new(crate::publish::Heads::default());
            reloader = reloader.hand_loads_to(Arc::clone(&slot));
            heads = Some(slot);
        } else {
            reloader = reloader.publishing_to(Arc::clone(&publisher));
        }
        let reloader = Arc::new(reloader);
        let mut fleet = None;
        let mut sharing = None;
        let (following, barrier) = match (options.source, first) {
            (Source::Etcd(prefix), Some(start)) => {
                sharing = Some(Sharing {
                    url: prefix.url.clone(),
                    access: prefix.access.clone(),
                    replica: replica.clone(),
                });
                let parts = Parts {
                    cache: &cache,
                    fleet: &fleet_of_nodes,
                    reloader: &reloader,
                    publisher: &publisher,
                    telemetry: &telemetry,
                    replica: &replica,
                    health: &health,
                };
                let (driver, following) = parts.start_etcd(prefix, start, heads, options.watch)?;
                fleet = driver;
                following.unzip()
            }
            (source, _) => {
                let following = match options.watch {
                    true => Some(
                        Following::files(
                            Arc::clone(&reloader) as Arc<dyn Sink>,
                            source.paths().to_vec(),
                            telemetry.clone(),
                            options.file_quiet,
                        )
                        .await,
                    ),
                    false => None,
                };
                let promoted_first = publisher.serve_promoted_first().is_some();
                if let Err(failure) = reloader.reload() {
                    match publisher.serve_last_good(&failure) {
                        Some(generation) => reloader.load_reports().serving(generation),
                        None if !promoted_first => return Err(RunError::Load(failure)),
                        None => {}
                    }
                }
                let barrier = Barrier::Files(Arc::clone(&reloader) as Arc<dyn Sink>);
                (following, Some(barrier))
            }
        };
        log_secret_policy(
            &cache,
            options.serve.secrets,
            options.serve.identity.is_some(),
        );
        Ok(Daemon {
            fleet: fleet_of_nodes,
            cache,
            reloader,
            publisher,
            telemetry,
            health,
            following,
            barrier,
            fleet_driver: fleet,
            sharing,
            serve: options.serve,
            admin: options.admin,
            admin_token: options.admin_token,
        })
    }

    /// Serve xDS and the admin API on `listeners` until `shutdown` completes; then end every
    /// stream, stop watching, and close the admin port.
    pub async fn serve(
        self,
        listeners: Listeners,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), RunError> {
        let Daemon {
            cache,
            fleet,
            reloader,
            publisher,
            telemetry,
            health,
            following,
            barrier,
            fleet_driver,
            sharing,
            serve,
            admin,
            admin_token,
        } = self;
        let (trigger, stop) = crate::shutdown::channel();
        if let (Ok(xds), Ok(admin)) = (listeners.xds.local_addr(), listeners.admin.local_addr()) {
            tracing::info!(xds_addr = %xds, admin_addr = %admin, "Serving xDS.");
        }
        // Every long-running task under the supervisor: one that ends or panics is said to
        // be down and started again (`supervise`).
        let supervisor = crate::supervise::Supervisor::new(telemetry.clone());
        let follower = following.map(|following| {
            let following = Arc::new(following);
            supervisor.spawn("follower", stop.clone(), move |stop| following.run(stop))
        });
        // Each task is spawned only when it has work: a task ending before shutdown is a
        // failure to the supervisor.
        let keeper = publisher.keeps_promoted().then(|| {
            let publisher = Arc::clone(&publisher);
            supervisor.spawn("keeper", stop.clone(), move |stop| {
                Arc::clone(&publisher).keep_promoted(stop)
            })
        });
        let fleet_rollout = fleet_driver.as_ref().map(|d| d.handle.clone());
        let fleet_task = fleet_driver.map(|d| {
            let mut start = Some(d.start);
            supervisor.spawn("fleet_rollout", stop.clone(), move |stop| {
                // Started again: the rollout is read again, and the last load handed over
                // again.
                let start = start.take().unwrap_or_else(|| {
                    d.driver.heads.again();
                    Default::default()
                });
                d.driver.clone().run(Arc::clone(&d.inbox), start, stop)
            })
        });
        let admin_addr = listeners
            .admin
            .local_addr()
            .map(reachable)
            .unwrap_or_default();
        let replica = sharing.as_ref().map(|s| s.replica.clone());
        let (view, replicas) = replica.as_deref().map(sharing::channel).unzip();
        let routes = Admin {
            fleet: Arc::clone(&fleet),
            cache: Arc::clone(&cache),
            reloader,
            publisher: Arc::clone(&publisher),
            telemetry: telemetry.clone(),
            show_secrets: serve.show_secrets,
            token: admin_token,
            new_streams: serve.limits.new_streams,
            fleet_rollout,
            barrier,
            replicas,
            supervisor: supervisor.clone(),
            source: health,
        };
        // This replica's summary taken from its status (`admin::summary`) and shared, and
        // every replica's followed, as one task: each half holds only its channels.
        let shared = sharing.zip(view).map(|(sharing, view)| {
            let routes = routes.clone();
            let (summary, summaries) = tokio::sync::watch::channel(None);
            let (seen, seen_by) = tokio::sync::watch::channel(None);
            let reached = match &routes.barrier {
                Some(Barrier::Etcd { reached, .. }) => Some(reached.clone()),
                _ => None,
            };
            supervisor.spawn("sharing", stop.clone(), move |stop| {
                let taking = admin::summary::summaries(
                    routes.clone(),
                    sharing.replica.clone(),
                    admin_addr.clone(),
                    seen_by.clone(),
                    summary.clone(),
                    stop.clone(),
                );
                let sharing = sharing.clone().run(
                    summaries.clone(),
                    reached.clone(),
                    seen.clone(),
                    view.clone(),
                    stop,
                );
                async move {
                    tokio::join!(taking, sharing);
                }
            })
        });
        // The admin server and the xDS server: the daemon cannot do without either, and ends
        // with an error if one stops before shutdown.
        let admin_task = supervisor.critical(
            "admin",
            stop.clone(),
            admin::serve(listeners.admin, routes, admin, stop.clone()),
        );
        // Staged rollouts on this replica, when the cache has a policy (read from what the
        // server reports of the proxies).
        let rollouts = crate::rollout::replica::drives(&cache).then(|| {
            let (cache, fleet, telemetry) =
                (Arc::clone(&cache), Arc::clone(&fleet), telemetry.clone());
            supervisor.spawn("rollouts", stop.clone(), move |stop| {
                crate::rollout::replica::drive(
                    Arc::clone(&cache),
                    Arc::clone(&fleet),
                    telemetry.clone(),
                    stop,
                )
            })
        });
        // The count of the streams opened and closed without an INFO line each, logged at
        // the end of each period (`telemetry::STREAM_LOG_PERIOD`).
        let stream_lines = {
            let telemetry = telemetry.clone();
            supervisor.spawn("stream_lines", stop.clone(), move |stop| {
                telemetry.clone().stream_line_counts(stop)
            })
        };
        let xds_task = supervisor.critical("xds", stop.clone(), {
            let served = server::serve(listeners.xds, cache, fleet, telemetry, serve, stop);
            async move { served.await.map_err(|e| e.to_string()) }
        });
        // Until shutdown, or until a task the daemon cannot do without stops.
        let failed = tokio::select! {
            () = shutdown => None,
            down = supervisor.failed() => Some(down),
        };
        trigger.fire();
        let _ = xds_task.await;
        if let Some(follower) = follower {
            let _ = follower.await;
        }
        if let Some(fleet_task) = fleet_task {
            let _ = fleet_task.await;
        }
        if let Some(shared) = shared {
            let _ = shared.await;
        }
        let _ = stream_lines.await;
        for task in [keeper, rollouts].into_iter().flatten() {
            task.abort();
        }
        let _ = admin_task.await;
        publisher.save_history();
        match failed {
            None => Ok(()),
            Some(down) => Err(RunError::Ended {
                task: down.task,
                cause: down.cause,
            }),
        }
    }
}

/// Load, then serve until `shutdown`: [`Daemon::load`] and [`Daemon::serve`] in one call.
pub async fn run(
    listeners: Listeners,
    options: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    Daemon::load(options)
        .await?
        .serve(listeners, shutdown)
        .await
}

/// A source followed, and its barrier.
type Followed = (Following, Barrier);

/// The parts an etcd source starts with.
struct Parts<'a> {
    cache: &'a Arc<Cache>,
    fleet: &'a Arc<Fleet>,
    reloader: &'a Arc<Reloader>,
    publisher: &'a Arc<Publisher>,
    telemetry: &'a Telemetry,
    replica: &'a str,
    health: &'a crate::source::Health,
}

impl Parts<'_> {
    /// Load the first read of an etcd prefix (with the fleet's rollout: what it promoted
    /// first); the fleet's rollout driver when there is one, and the prefix's following from
    /// that read when `watch`.
    fn start_etcd(
        &self,
        prefix: etcd::Prefix,
        start: EtcdStart,
        heads: Option<Arc<crate::publish::Heads>>,
        watch: bool,
    ) -> Result<(Option<FleetDriver>, Option<Followed>), RunError> {
        let Parts {
            cache,
            fleet,
            reloader,
            publisher,
            telemetry,
            replica,
            health,
        } = *self;
        let EtcdStart {
            documents,
            fleet: start,
        } = start;
        // With the fleet's rollout: what it promoted serves first (and what it rolls out to
        // the canaries), never the documents as they are now.
        let promoted = match &start {
            Some(start) => serve_fleet_start(publisher, reloader.options(), cache, start)?,
            None => false,
        };
        // From etcd: no files to watch or keep; a first read that does not load is an error
        // (there is no state directory to serve from meanwhile), unless the fleet's promoted
        // generation serves.
        let revision = documents.revision;
        if let Err(failure) = reloader.reload_documents(&documents.documents, revision, None) {
            if !promoted {
                return Err(RunError::Load(failure));
            }
        }
        // With the fleet's rollout and nothing promoted yet, the first load serves every node
        // at once (as on one server); the rollout proposes it as the first promoted
        // generation.
        if let Some((config, work)) = heads
            .as_ref()
            .filter(|_| !promoted)
            .and_then(|heads| heads.take_config(revision))
        {
            let from = Publication {
                revision: Some(revision),
                note: None,
                work,
            };
            let generation = publisher.publish_named(config, from);
            reloader.load_reports().loaded_as(revision, generation);
        }
        health.answering(&prefix.url.display());
        let mut driver = None;
        if let (Some(start), Some(heads)) = (start, heads) {
            let (handle, inbox) = fleet_rollout::channels();
            driver = Some(FleetDriver {
                driver: fleet_rollout::Driver {
                    url: prefix.url.clone(),
                    access: prefix.access.clone(),
                    replica: replica.to_string(),
                    cache: Arc::clone(cache),
                    fleet: Arc::clone(fleet),
                    publisher: Arc::clone(publisher),
                    reports: reloader.load_reports(),
                    options: reloader.options().clone(),
                    heads,
                    telemetry: telemetry.clone(),
                },
                inbox: Arc::new(tokio::sync::Mutex::new(inbox)),
                start: start.held,
                handle,
            });
        }
        let following = watch.then(|| {
            Following::etcd(
                Arc::clone(reloader) as Arc<dyn Sink>,
                prefix,
                documents,
                health.clone(),
            )
        });
        Ok((driver, following))
    }
}

/// The first read of an etcd source: the documents, and with a rollout policy the fleet's
/// rollout kept beside them.
struct EtcdStart {
    documents: Documents,
    fleet: Option<FleetStart>,
}

/// Read the prefix at one revision and, with a rollout policy (`rollout`), the fleet's
/// rollout beside it; each read bounded by the prefix's timeout.
async fn read_etcd(prefix: &etcd::Prefix, rollout: bool) -> Result<EtcdStart, RunError> {
    let (mut client, documents) = prefix.read_first().await?;
    tracing::info!(source = %prefix.url.display(), revision = documents.revision, documents = documents.documents.len(), "Read the snapshot documents from etcd.");
    let url = &prefix.url;
    let late = || SourceError::Unavailable {
        url: url.display(),
        message: format!(
            "no answer within {} reading the fleet's rollout",
            humantime::format_duration(prefix.timeout)
        ),
    };
    if rollout {
        let start =
            tokio::time::timeout(prefix.timeout, fleet_rollout::read_start(&mut client, url))
                .await
                .map_err(|_| late())??;
        return Ok(EtcdStart {
            documents,
            fleet: Some(start),
        });
    }
    // A fleet rollout kept in etcd that this replica will not follow: say so (its edge nodes
    // get the documents as they are, vetted or not).
    if let Ok(Ok(held)) = tokio::time::timeout(
        prefix.timeout,
        crate::rollout::fleetwide::store::read(&mut client, url),
    )
    .await
    {
        if let Some(shared) = held.shared {
            tracing::warn!(
                promoted = shared.stable.revision,
                candidate = shared.candidate.as_ref().map(|c| c.mark.revision),
                "etcd keeps a rollout for this prefix, but this replica has no canary flags: it serves the documents as they are to every node, whatever the fleet's canaries said. Give every replica the same --canary-id/--canary-cluster and --rollout-bake."
            );
        }
    }
    Ok(EtcdStart {
        documents,
        fleet: None,
    })
}

/// A generation the fleet's rollout names, of the documents at `revision`.
fn named(revision: i64) -> Publication {
    Publication {
        revision: Some(revision),
        ..Publication::default()
    }
}

/// Serve what the fleet's rollout kept in etcd says, before the documents as they are now:
/// the promoted generation to every node, and the candidate to the canaries in its phase.
/// `true` when a promoted generation serves; `false` without a state (the documents as they
/// are now will be the first, promoted, generation). A state whose promoted generation does
/// not load here is an error: nothing unvetted may go to every node.
fn serve_fleet_start(
    publisher: &Publisher,
    options: &LoadOptions,
    cache: &Cache,
    start: &FleetStart,
) -> Result<bool, RunError> {
    let (Some(shared), Some(documents)) = (&start.held.shared, &start.stable) else {
        return Ok(false);
    };
    let revision = shared.stable.revision;
    let stable = crate::config::load_documents(documents, options)
        .map_err(|failure| RunError::PromotedDoesNotLoad { revision, failure })?;
    if stable.content_version() != shared.stable.version {
        return Err(RunError::PromotedCopyDiffers { revision });
    }
    let generation = publisher.publish_named(stable, named(shared.stable.revision));
    tracing::info!(
        generation,
        revision = shared.stable.revision,
        promoted_by = %shared.promoted_by,
        "Serving the fleet's promoted generation from etcd to every node."
    );
    let (Some(candidate), Some(documents)) = (&shared.candidate, &start.candidate) else {
        return Ok(true);
    };
    match crate::config::load_documents(documents, options) {
        Ok(config) if config.content_version() == candidate.mark.version => {
            let number = publisher.publish_named(config, named(candidate.mark.revision));
            // A bake goes on while etcd keeps its key (`source::etcd::keys::bake`): the driver
            // learns how much is left from its watch.
            let bake_left = cache
                .policy()
                .map(|p| p.bake)
                .filter(|_| start.held.baking.as_ref() == Some(&candidate.mark.version));
            cache.set_phase(
                number,
                candidate.phase.local(std::time::Instant::now(), bake_left),
            );
            tracing::info!(
                generation = number,
                revision = candidate.mark.revision,
                "Serving the fleet's candidate to the canaries."
            );
        }
        // The rollout's driver loads it again once serving.
        _ => tracing::warn!(
            revision = candidate.mark.revision,
            "The fleet's candidate cannot be loaded yet; the canaries get the promoted generation meanwhile."
        ),
    }
    Ok(true)
}

/// Say at start whether the snapshot holds private key material, and who gets it.
fn log_secret_policy(cache: &Cache, secrets: Secrets, bound: bool) {
    let current = cache.current();
    let holding: Vec<&str> = current
        .config
        .files
        .iter()
        .flat_map(|f| &f.resources)
        .filter(|r| r.has_private_material())
        .map(|r| r.name.as_str())
        .collect();
    if holding.is_empty() {
        return;
    }
    match secrets {
        Secrets::Redact if bound => tracing::info!(
            resources = holding.len(),
            names = ?holding,
            "The snapshot holds private key material. It goes only to streams whose client \
             certificate is bound to their node (--node-identity)."
        ),
        Secrets::Redact => tracing::warn!(
            resources = holding.len(),
            names = ?holding,
            "The snapshot holds private key material. Proxies get these resources without it \
             (they cannot prove who they are); serve with --insecure-serve-secrets for a \
             sidecar on loopback."
        ),
        Secrets::Serve => tracing::warn!(
            resources = holding.len(),
            names = ?holding,
            "The snapshot holds private key material, and --insecure-serve-secrets sends it to \
             any client that asks for it."
        ),
    }
}

/// An admin address as another host reaches it: a wildcard bind is named by this host's
/// name.
fn reachable(addr: std::net::SocketAddr) -> String {
    if !addr.ip().is_unspecified() {
        return addr.to_string();
    }
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| addr.ip().to_string());
    format!("{host}:{}", addr.port())
}
