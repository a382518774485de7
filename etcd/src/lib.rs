//! The part of etcd's v3 API Switchyard uses, over tonic: reading, writing and transactions
//! on keys (KV), watching them, and leases, to members reached over plain HTTP/2 or TLS,
//! with a user's password when etcd asks for one.
//!
//! The messages and the gRPC client stubs are code tonic-prost-build generated from etcd's
//! own .proto files, kept in `src/generated/` (`tests/generated.rs` regenerates them and
//! requires the same bytes), so building this crate needs no protoc. What is written by hand
//! is the little around the stubs: options that become requests, accessors on the answers,
//! the bidirectional streams of watches and lease renewals, and the password's token.
//!
//! Must not: know anything of Switchyard (its keys, documents or rollouts), or retry a call
//! but once, with a fresh token, when etcd says the token expired.

mod client;
mod request;
mod response;

/// etcd's messages and client stubs, as generated.
pub mod pb {
    /// Keys and values, and the events a watch sends (`mvccpb`).
    #[allow(missing_docs, clippy::all, clippy::pedantic)]
    pub mod mvccpb {
        include!("generated/mvccpb.rs");
    }
    /// Users and roles (`authpb`), which the server's messages name.
    #[allow(missing_docs, clippy::all, clippy::pedantic)]
    pub mod authpb {
        include!("generated/authpb.rs");
    }
    /// The server's services and their messages (`etcdserverpb`).
    #[allow(missing_docs, clippy::all, clippy::pedantic)]
    pub mod etcdserverpb {
        include!("generated/etcdserverpb.rs");
    }
}

pub use client::{
    Certificate, Client, ConnectOptions, Identity, KvClient, LeaseKeepAliveStream, LeaseKeeper,
    TlsOptions, WatchClient, WatchStream,
};
pub use request::{
    Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    WatchOptions,
};
pub use response::{
    CompactionResponse, DeleteResponse, Event, EventType, GetResponse, KeyValue,
    LeaseGrantResponse, LeaseKeepAliveResponse, LeaseRevokeResponse, PutResponse, ResponseHeader,
    StatusResponse, TxnOpResponse, TxnResponse, WatchResponse,
};

/// What a call to etcd can end with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// What was asked cannot be asked (an endpoint that is not a URL, TLS on `http://`, ...).
    #[error("{0}")]
    InvalidArgs(String),
    /// The channel could not be set up.
    #[error("transport error: {0}")]
    TransportError(#[from] tonic::transport::Error),
    /// etcd's answer, or the channel's when etcd could not be reached.
    #[error("etcd answered {0}")]
    GRpcStatus(#[from] tonic::Status),
    /// A watch's requests could not be sent (its stream is gone).
    #[error("the watch stream is closed: {0}")]
    WatchError(String),
    /// A lease renewal could not be sent (its stream is gone).
    #[error("the lease's renewals are closed: {0}")]
    LeaseKeepAliveError(String),
}

/// What a call to etcd returns.
pub type Result<T> = std::result::Result<T, Error>;
