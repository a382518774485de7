//! Switchyard: an xDS management server for Envoy fleets, driven by snapshot files.
//!
//! ```text
//!   snapshot files ──watch──▶ config ──load+validate──▶ cache ──per node group──▶ Snapshot
//!   (YAML / JSON)              (descriptor pool,         (Generation,              │
//!                               content hashes)           watch channel)           ▼
//!   Envoy ◀──gRPC── server (tonic adapters) ◀──poll_response── protocol (pure state machine)
//!         ──req───▶                         ──handle_request─▶
//! ```
//!
//! - [`resource`] is the shared vocabulary: the resource types and a loaded
//!   [`resource::Resource`] (encoded once, with its `Any` wrapping).
//! - [`config`] reads and validates files into a whole [`config::Config`], or reports every
//!   error; a failed load changes nothing.
//! - [`cache`] publishes each good config as a generation and builds one [`cache::Snapshot`]
//!   per node group, sharing the loaded resources by `Arc`.
//! - [`protocol`] decides, per stream and type, what to send (subscriptions, nonces, ACK/NACK,
//!   TTL heartbeats, make-before-break order), as one stream core with two flavors, State of
//!   the World and delta; no IO, and time only as an argument.
//! - [`server`] runs the gRPC services that feed the protocol and write what it returns,
//!   straight from the resources' shared bytes.
//! - [`diff`] says what a change of the files does to each node group (`switchyard diff`).
//! - [`import`] turns an Envoy bootstrap's static resources into snapshot files and a
//!   bootstrap that takes them over ADS (`switchyard import`).
//! - [`preflight`] checks each node group's snapshot with the real Envoy (`envoy --mode
//!   validate` on a bootstrap that holds it) before it is published, when asked to.
//! - [`source`] is where documents come from, and how they are followed: the `--config`
//!   files (watched) or an etcd prefix (one watch, applied key by key); it hands them to a
//!   `source::Sink`, which [`publish`] is: load, check, publish a generation, keep history
//!   (and each good load with [`state`]). [`config::redact`] knows what is secret.
//! - [`telemetry`] logs and counts every operational event, into [`metrics`] (a leaf: the
//!   handles and the exposition).
//! - [`fleet`] keeps what every connected proxy has, which [`admin`] (the admin HTTP server:
//!   `/status`, `/config_dump`, `/metrics`, the page) shows; [`rollout`] decides staged
//!   rollouts and drives them (`rollout::replica` from the fleet's reports on this replica,
//!   `rollout::fleetwide` for every replica of an etcd source), with no call into the
//!   server: the server reports what proxies hold, the rollout reads it.
//! - [`daemon`] wires it all: [`run`] reads the source, loads it, and serves xDS and the
//!   admin API on the listeners given until shutdown ([`shutdown`]: one signal, held by
//!   every long-running task). [`cli`] (the command line, one module per subcommand)
//!   and the in-process tests start the server through it.
//!
//! The load generator behind `switchyard loadgen` is a crate of its own (`loadgen/`,
//! `switchyard_loadgen`): a client of any xDS server, so none of these modules.
#![forbid(unsafe_code)]

pub mod admin;
pub mod cache;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod diff;
pub mod fleet;
pub mod history;
pub mod import;
pub mod metrics;
pub mod preflight;
pub mod protocol;
pub mod publish;
pub mod resource;
pub mod rollout;
pub mod server;
pub mod sharing;
pub mod shutdown;
pub mod source;
pub mod state;
pub mod supervise;
pub mod telemetry;
#[cfg(test)]
mod testing;

pub use daemon::run;
