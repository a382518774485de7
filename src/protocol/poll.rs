//! What a poller holds (REST-JSON, or a gRPC `Fetch*`: P36), as far as the server can tell
//! from its polls.
//!
//! A poll has no nonce: each one's `version_info` is what the poller has (P13, the version it
//! last took), and its `error_detail`, if any, what it made of the last answer: the ACK or
//! NACK a stream's request carries. Envoy's REST client sends no `error_detail` (it only logs
//! why it rejected an answer) and polls again with the version it had: a poller answered the
//! same version [`REJECTED_AFTER`] times that polls again still short of it did not take it,
//! and is taken to have rejected it, with words saying so.
//!
//! Owns: one poller's state per type, from one poll to the next ([`PollState::poll`]). Must
//! not: keep pollers or know time (the fleet keeps them, and ages the quiet ones out), or do
//! any IO.

use std::sync::Arc;

use super::{Nack, SyncState, TypeStatus};

/// How many answers of a version a poller that keeps polling at another must have had
/// before it is taken to have rejected it: one lost answer is not a rejection.
pub const REJECTED_AFTER: u32 = 2;

/// One type of one poller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PollState {
    state: SyncState,
    /// What the poller has: the `version_info` of its last poll.
    acked: String,
    /// The version its last poll was answered with, and how many polls in a row were
    /// answered with it while it had another.
    answered: Option<(String, u32)>,
}

impl PollState {
    /// A poll at `version_info` (what the poller has), with `error` (its `error_detail`, if
    /// any), answered with `answer` (the version of what it is sent; equal to `version_info`
    /// when nothing changed).
    pub fn poll(&mut self, version_info: &str, error: Option<&str>, answer: &str) {
        self.acked = version_info.to_string();
        // Answered with the same version as the last poll, to a poller that still has
        // another: one more such answer.
        let again = match &self.answered {
            Some((v, n)) if v == answer && version_info != answer => n + 1,
            _ => 1,
        };
        let last_answer = self.answered.take().map(|(v, _)| v);
        self.state = match error {
            // P5: a NACK names the version it still has; what it rejected is what it was
            // answered with last.
            Some(error) => SyncState::Nacked {
                nonce: String::new(),
                rejected_version: last_answer.unwrap_or_else(|| answer.to_string()),
                accepted_version: version_info.to_string(),
                nack: Arc::new(Nack {
                    error: error.to_string(),
                    changed: Arc::from([]),
                    runs: None,
                }),
            },
            None if version_info == answer => SyncState::Acked {
                version: version_info.to_string(),
            },
            None if again > REJECTED_AFTER => SyncState::Nacked {
                nonce: String::new(),
                rejected_version: answer.to_string(),
                accepted_version: version_info.to_string(),
                nack: Arc::new(Nack {
                    error: format!(
                        "did not take version {answer}: answered it {} times, it polls again \
                         at version {version_info:?} (it sends no reason: Envoy's REST client \
                         logs it)",
                        again - 1
                    ),
                    changed: Arc::from([]),
                    runs: None,
                }),
            },
            None => SyncState::Sent {
                nonce: String::new(),
                version: answer.to_string(),
            },
        };
        if version_info != answer {
            self.answered = Some((answer.to_string(), again));
        }
    }

    /// As streams report their types (`fleet`, `/status`).
    pub fn status(&self, not_found: Vec<String>) -> TypeStatus<'_> {
        TypeStatus {
            state: std::borrow::Cow::Borrowed(&self.state),
            acked_version: std::borrow::Cow::Borrowed(&self.acked),
            // A poller's report is made anew from each poll, never told by its revision.
            revision: 0,
            oversized: None,
            not_found,
        }
    }

    pub fn state(&self) -> &SyncState {
        &self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nacked(s: &PollState) -> Option<(&str, &str, &str)> {
        match s.state() {
            SyncState::Nacked {
                rejected_version,
                accepted_version,
                nack,
                ..
            } => Some((rejected_version, accepted_version, nack.error.as_str())),
            _ => None,
        }
    }

    /// P4 for a poller: answered a new version, it polls next at that version: it took it.
    #[test]
    fn p4_a_poller_at_the_version_it_was_answered_took_it() {
        let mut s = PollState::default();
        s.poll("", None, "v1");
        assert_eq!(
            s.state(),
            &SyncState::Sent {
                nonce: String::new(),
                version: "v1".into()
            }
        );
        s.poll("v1", None, "v1");
        assert_eq!(
            s.state(),
            &SyncState::Acked {
                version: "v1".into()
            }
        );
        assert_eq!(s.status(Vec::new()).acked_version, "v1");
    }

    /// P5: a poll with an `error_detail` rejects what it was answered last, and still has
    /// the version it names.
    #[test]
    fn p5_a_poll_with_an_error_detail_is_a_nack_of_the_last_answer() {
        let mut s = PollState::default();
        s.poll("v1", None, "v2");
        s.poll("v1", Some("v2 is broken"), "v2");
        assert_eq!(nacked(&s), Some(("v2", "v1", "v2 is broken")));
        // The fix: answered v3, then polled at v3.
        s.poll("v1", None, "v3");
        assert!(matches!(s.state(), SyncState::Sent { .. }));
        s.poll("v3", None, "v3");
        assert_eq!(
            s.state(),
            &SyncState::Acked {
                version: "v3".into()
            }
        );
    }

    /// P5 for Envoy's REST client, which sends no reason: answered v2 twice and back at v1
    /// again, it did not take v2. One answer it seems not to have taken is not enough (an
    /// answer may be lost).
    #[test]
    fn p5_a_poller_back_at_its_version_after_two_answers_rejected_them() {
        let mut s = PollState::default();
        s.poll("v1", None, "v1");
        s.poll("v1", None, "v2");
        assert!(nacked(&s).is_none(), "answered once");
        s.poll("v1", None, "v2");
        assert!(nacked(&s).is_none(), "answered twice: one may be lost");
        s.poll("v1", None, "v2");
        let (rejected, kept, why) = nacked(&s).expect("a rejection");
        assert_eq!((rejected, kept), ("v2", "v1"));
        assert!(why.contains("did not take version v2"), "{why}");
        // A change (v3) starts over; taking it ends the NACK.
        s.poll("v1", None, "v3");
        assert!(matches!(s.state(), SyncState::Sent { .. }));
        s.poll("v3", None, "v3");
        assert!(matches!(s.state(), SyncState::Acked { .. }));
    }
}
