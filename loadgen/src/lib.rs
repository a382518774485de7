//! `switchyard loadgen`: simulated Envoys against any xDS server, to measure it.
//!
//! - [`proxy`]: one simulated proxy ([`Proxy`]), pure: responses in, requests out, like
//!   Envoy's xDS client (wildcard CDS and LDS, EDS for the EDS clusters it gets and RDS for
//!   the route configurations its listeners name, ACKing everything or NACKing a fraction).
//! - [`ads`]: what its ADS stream puts on the wire: State of the World or delta, with its
//!   node of Envoy's size (`--node-extensions`) on every request, encoded once per run.
//! - [`run`](mod@run): N of them, each over its own connection and stream, reconnecting with what it
//!   holds after Envoy's jittered backoff; the trigger command; the server's RSS and CPU.
//! - [`report`]: connect time, time to the first full config, convergence after the
//!   trigger, responses and bytes by type, as JSON or a table.
//! - [`args`]: its flags (`switchyard loadgen --help`).
//!
//! Must not: depend on Switchyard's server (this crate has no dependency on it): it is a
//! client, for any xDS server.
#![forbid(unsafe_code)]

pub mod ads;
pub mod args;
pub mod proxy;
pub mod report;
pub mod run;

pub use args::{LoadgenArgs, Protocol, ReportFormat, ENVOY_EXTENSIONS, MAX_CLIENTS};
pub use proxy::{Outgoing, Proxy};
pub use report::{table, Report};
pub use run::{run, LoadgenError};
