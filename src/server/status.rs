//! Where errors become gRPC statuses: the one mapping from this crate's errors to what goes
//! on the wire.
//!
//! Must not: decide when an error happens; it only says how each is reported.

use tonic::Status;

use crate::protocol::ProtocolError;

/// A client's protocol error ends its stream with INVALID_ARGUMENT (P3); going past a limit,
/// with RESOURCE_EXHAUSTED.
pub fn from_protocol(error: &ProtocolError) -> Status {
    if error.is_limit() {
        Status::resource_exhausted(error.to_string())
    } else {
        Status::invalid_argument(error.to_string())
    }
}
