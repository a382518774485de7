//! etcd's answers, as generated, with accessors by name.

use crate::pb::{etcdserverpb as pb, mvccpb};

pub type ResponseHeader = pb::ResponseHeader;
pub type GetResponse = pb::RangeResponse;
pub type PutResponse = pb::PutResponse;
pub type DeleteResponse = pb::DeleteRangeResponse;
pub type TxnResponse = pb::TxnResponse;
pub type WatchResponse = pb::WatchResponse;
pub type LeaseGrantResponse = pb::LeaseGrantResponse;
pub type LeaseRevokeResponse = pb::LeaseRevokeResponse;
pub type LeaseKeepAliveResponse = pb::LeaseKeepAliveResponse;
pub type StatusResponse = pb::StatusResponse;
pub type CompactionResponse = pb::CompactionResponse;
pub type KeyValue = mvccpb::KeyValue;
pub type Event = mvccpb::Event;
pub type EventType = mvccpb::event::EventType;

/// The answer to one operation of a transaction.
#[derive(Clone, Debug)]
pub enum TxnOpResponse {
    Get(GetResponse),
    Put(PutResponse),
    Delete(DeleteResponse),
    Txn(TxnResponse),
}

impl pb::ResponseHeader {
    /// The store's revision when the request was applied.
    pub fn revision(&self) -> i64 {
        self.revision
    }
}

impl pb::RangeResponse {
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }
    /// The keys read (none with `count_only`).
    pub fn kvs(&self) -> &[KeyValue] {
        &self.kvs
    }
    /// How many keys are in the range (all of them, whatever the limit).
    pub fn count(&self) -> i64 {
        self.count
    }
}

impl pb::PutResponse {
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }
}

impl pb::DeleteRangeResponse {
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }
}

impl pb::TxnResponse {
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }
    /// Whether every comparison held (the `and_then` operations ran).
    pub fn succeeded(&self) -> bool {
        self.succeeded
    }
    /// The answers to the operations that ran, in their order.
    pub fn op_responses(&self) -> Vec<TxnOpResponse> {
        use pb::response_op::Response;
        self.responses
            .iter()
            .filter_map(|r| r.response.clone())
            .map(|r| match r {
                Response::ResponseRange(r) => TxnOpResponse::Get(r),
                Response::ResponsePut(r) => TxnOpResponse::Put(r),
                Response::ResponseDeleteRange(r) => TxnOpResponse::Delete(r),
                Response::ResponseTxn(r) => TxnOpResponse::Txn(r),
            })
            .collect()
    }
}

impl pb::WatchResponse {
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }
    /// The answer to the watch's creation.
    pub fn created(&self) -> bool {
        self.created
    }
    /// The watch ended (see [`compact_revision`](Self::compact_revision) and the reason).
    pub fn canceled(&self) -> bool {
        self.canceled
    }
    /// Set when the watch asked for a revision etcd compacted away: the oldest it has.
    pub fn compact_revision(&self) -> i64 {
        self.compact_revision
    }
    pub fn events(&self) -> &[Event] {
        &self.events
    }
}

impl mvccpb::Event {
    pub fn event_type(&self) -> EventType {
        self.r#type()
    }
    /// The key as the change left it (for a delete, its key and the revision only).
    pub fn kv(&self) -> Option<&KeyValue> {
        self.kv.as_ref()
    }
}

impl mvccpb::KeyValue {
    pub fn key(&self) -> &[u8] {
        &self.key
    }
    pub fn value(&self) -> &[u8] {
        &self.value
    }
    pub fn create_revision(&self) -> i64 {
        self.create_revision
    }
    pub fn mod_revision(&self) -> i64 {
        self.mod_revision
    }
    /// Writes since the key was created (1 after the first).
    pub fn version(&self) -> i64 {
        self.version
    }
    /// The lease the key is attached to (0: none).
    pub fn lease(&self) -> i64 {
        self.lease
    }
}

impl pb::LeaseGrantResponse {
    pub fn id(&self) -> i64 {
        self.id
    }
    /// The lease's time, in seconds.
    pub fn ttl(&self) -> i64 {
        self.ttl
    }
}

impl pb::LeaseKeepAliveResponse {
    pub fn id(&self) -> i64 {
        self.id
    }
    /// The time left after the renewal, in seconds; 0 or less when the lease is gone.
    pub fn ttl(&self) -> i64 {
        self.ttl
    }
}

impl pb::ResponseHeader {
    /// The member that answered.
    pub fn member_id(&self) -> u64 {
        self.member_id
    }
}

impl pb::StatusResponse {
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.header.as_ref()
    }
    /// The member that leads the cluster.
    pub fn leader(&self) -> u64 {
        self.leader
    }
}
