//! Types the server does not serve, asked for on an aggregated stream (P33).
//!
//! An aggregated stream carries every type of its client, so a type the server does not
//! serve must not end it: that would cut the client off from all its other types (an Envoy
//! configured for a type this server lacks would otherwise lose everything). Such a type is
//! answered as a set of resources that do not exist: each response has no resources and
//! names every subscribed name in a `NOT_FOUND` resource error (P32), and in delta in
//! `removed_resources` too (P20). Its ACKs and NACKs are kept, as for any type, for
//! operators.
//!
//! Owns: the subscription, nonce and answer state of each such type on one stream. Must
//! not: serve anything (there is nothing to serve), or grow without bound (at most
//! [`MAX_UNKNOWN_TYPES`] types a stream; their names count towards the stream's name
//! limit).

use std::collections::BTreeSet;

use super::{Event, ProtocolError, Subscription, SyncState};

/// The most distinct types the server does not serve one stream may ask for; one more ends
/// the stream (a client asking for that many is broken, and each costs memory).
pub const MAX_UNKNOWN_TYPES: usize = 16;

/// The longest type URL kept for a type the server does not serve; a longer one is cut
/// (with `...`) in what operators see. Its responses echo it whole.
const SHOWN_TYPE_URL: usize = 200;

/// What a request for a type the server does not serve says, whatever the flavor.
#[derive(Debug)]
pub struct UnknownRequest<'a> {
    /// `response_nonce`.
    pub nonce: &'a str,
    /// `error_detail.message`, for a NACK.
    pub error: Option<&'a str>,
    /// SotW: `version_info` (the version the client has, in an ACK or NACK).
    pub version: &'a str,
    pub names: UnknownNames<'a>,
}

/// A request's names, by flavor.
#[derive(Debug)]
pub enum UnknownNames<'a> {
    /// SotW: the whole set (P7).
    Sotw(&'a [String]),
    /// Delta: what to add and drop (P17).
    Delta {
        subscribe: &'a [String],
        unsubscribe: &'a [String],
    },
}

/// A response for a type the server does not serve: no resources, each name it is asked
/// for not found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownResponse {
    /// The type URL as the client gave it.
    pub type_url: String,
    /// SotW `version_info` (delta `system_version_info`): always [`UNKNOWN_TYPE_VERSION`].
    pub version: String,
    pub nonce: String,
    /// The names asked for: each a `NOT_FOUND` resource error (P32), and in delta also in
    /// `removed_resources` (P20).
    pub not_found: Vec<String>,
}

/// The version of a type the server does not serve: it never has a resource of it.
pub const UNKNOWN_TYPE_VERSION: &str = "none";

/// What one stream asked for of types the server does not serve.
#[derive(Debug, Default)]
pub struct Unknowns {
    types: Vec<UnknownType>,
}

/// One type the server does not serve, on one stream.
#[derive(Debug)]
struct UnknownType {
    type_url: String,
    subscription: Subscription,
    latest_nonce: Option<String>,
    state: SyncState,
    /// A response is due, naming these as not found.
    due: Option<Vec<String>>,
}

/// What operators see of a type the server does not serve, on one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownStatus {
    /// The type URL (cut to 200 characters).
    pub type_url: String,
    /// The names the client subscribes to (empty for a wildcard).
    pub names: Vec<String>,
    pub state: SyncState,
}

impl Unknowns {
    /// Take in a request for `type_url`, a type the server does not serve. The first for a
    /// type is reported ([`Event::UnknownType`]); more than [`MAX_UNKNOWN_TYPES`] types is
    /// an error.
    pub fn handle(
        &mut self,
        type_url: &str,
        request: UnknownRequest<'_>,
        events: &mut std::collections::VecDeque<Event>,
    ) -> Result<(), ProtocolError> {
        let index = match self.types.iter().position(|t| t.type_url == type_url) {
            Some(i) => i,
            None if self.types.len() >= MAX_UNKNOWN_TYPES => {
                return Err(ProtocolError::TooManyUnknownTypes {
                    type_url: shown(type_url),
                    limit: MAX_UNKNOWN_TYPES,
                })
            }
            None => {
                events.push_back(Event::UnknownType {
                    type_url: shown(type_url),
                });
                self.types.push(UnknownType {
                    type_url: type_url.to_string(),
                    subscription: Subscription::default(),
                    latest_nonce: None,
                    state: SyncState::NotSent,
                    due: None,
                });
                self.types.len() - 1
            }
        };
        let t = &mut self.types[index];
        let first = t.latest_nonce.is_none() && t.due.is_none() && t.state == SyncState::NotSent;
        // P4/P5 (P17): an answer to the latest response; P6: a SotW request answering an
        // older one is stale and ignored (P18: in delta only its ACK meaning is lost).
        let mut stale = false;
        if !request.nonce.is_empty() {
            if t.latest_nonce.as_deref() == Some(request.nonce) {
                let sent = t.state.sent_version().unwrap_or_default().to_string();
                t.state = match request.error {
                    Some(error) => SyncState::Nacked {
                        nonce: request.nonce.to_string(),
                        rejected_version: sent,
                        accepted_version: request.version.to_string(),
                        nack: std::sync::Arc::new(super::Nack {
                            error: error.to_string(),
                            changed: std::sync::Arc::from(Vec::new()),
                            runs: None,
                        }),
                    },
                    None => SyncState::Acked { version: sent },
                };
            } else {
                stale = true;
            }
        }
        match request.names {
            UnknownNames::Sotw(_) if stale => {}
            UnknownNames::Sotw(names) => {
                let before = t.subscription.clone();
                t.subscription.apply_sotw(names);
                if first || t.subscription != before {
                    t.due = Some(t.subscription.names().iter().cloned().collect());
                }
            }
            UnknownNames::Delta {
                subscribe,
                unsubscribe,
            } => {
                let change = t.subscription.apply_delta(first, subscribe, unsubscribe);
                let mut asked: BTreeSet<String> =
                    t.due.take().unwrap_or_default().into_iter().collect();
                asked.extend(change.subscribed);
                asked.extend(change.resubscribed);
                // The first request is answered even when it names nothing (a wildcard): the
                // client learns at once that there is nothing.
                if first || !asked.is_empty() {
                    t.due = Some(asked.into_iter().collect());
                }
            }
        }
        Ok(())
    }

    /// The next response due, with its nonce from `nonces` (unique on the stream, P2).
    pub fn poll(&mut self, nonces: &mut u64) -> Option<UnknownResponse> {
        let t = self.types.iter_mut().find(|t| t.due.is_some())?;
        let not_found = t.due.take().unwrap_or_default();
        *nonces += 1;
        let nonce = nonces.to_string();
        t.latest_nonce = Some(nonce.clone());
        t.state = SyncState::Sent {
            nonce: nonce.clone(),
            version: UNKNOWN_TYPE_VERSION.to_string(),
        };
        Some(UnknownResponse {
            type_url: t.type_url.clone(),
            version: UNKNOWN_TYPE_VERSION.to_string(),
            nonce,
            not_found,
        })
    }

    /// How many names the client subscribes to, every such type together.
    pub fn subscribed_names(&self) -> usize {
        self.types
            .iter()
            .map(|t| t.subscription.names().len())
            .sum()
    }

    /// What operators see: each type asked for, its names and where it stands.
    pub fn status(&self) -> Vec<UnknownStatus> {
        self.types
            .iter()
            .map(|t| UnknownStatus {
                type_url: shown(&t.type_url),
                names: t.subscription.names().iter().cloned().collect(),
                state: t.state.clone(),
            })
            .collect()
    }
}

/// A client's type URL as operators see it: cut to [`SHOWN_TYPE_URL`] characters.
fn shown(type_url: &str) -> String {
    match type_url.char_indices().nth(SHOWN_TYPE_URL) {
        Some((at, _)) => format!("{}...", &type_url[..at]),
        None => type_url.to_string(),
    }
}
