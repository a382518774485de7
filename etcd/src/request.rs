//! Options that become etcd's requests: reads, writes, deletes and watches of a key or of
//! every key under a prefix, and transactions of comparisons and operations.

use crate::pb::etcdserverpb as pb;

/// What a range read is sorted by, and in which order (etcd's `RangeRequest` enums).
pub type SortTarget = pb::range_request::SortTarget;
pub type SortOrder = pb::range_request::SortOrder;

/// The end of the range of every key that starts with `key` (etcd's `range_end`): `key`
/// with its last byte below 0xff raised by one and what follows cut; every key for an empty
/// prefix (or one of 0xff bytes only), which etcd writes as `\0`.
fn prefix_end(key: &[u8]) -> Vec<u8> {
    match key.iter().rposition(|b| *b < 0xff) {
        Some(i) => {
            let mut end = key[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

/// `range_end` for `key` with or without its prefix.
fn range_end(key: &[u8], prefix: bool) -> Vec<u8> {
    if prefix {
        prefix_end(key)
    } else {
        Vec::new()
    }
}

/// How to read (etcd's `Range`).
#[derive(Clone, Debug, Default)]
pub struct GetOptions {
    request: pb::RangeRequest,
    prefix: bool,
}

impl GetOptions {
    pub fn new() -> GetOptions {
        GetOptions::default()
    }
    /// Every key that starts with the key.
    pub fn with_prefix(mut self) -> GetOptions {
        self.prefix = true;
        self
    }
    /// As the store was at `revision` (0: the latest).
    pub fn with_revision(mut self, revision: i64) -> GetOptions {
        self.request.revision = revision;
        self
    }
    /// At most `limit` keys (0: no limit).
    pub fn with_limit(mut self, limit: i64) -> GetOptions {
        self.request.limit = limit;
        self
    }
    /// Sorted by `target` in `order`.
    pub fn with_sort(mut self, target: SortTarget, order: SortOrder) -> GetOptions {
        self.request.sort_target = target as i32;
        self.request.sort_order = order as i32;
        self
    }
    /// The keys without their values.
    pub fn with_keys_only(mut self) -> GetOptions {
        self.request.keys_only = true;
        self
    }
    /// Only how many keys there are.
    pub fn with_count_only(mut self) -> GetOptions {
        self.request.count_only = true;
        self
    }
    /// Only keys modified at `revision` or later.
    pub fn with_min_mod_revision(mut self, revision: i64) -> GetOptions {
        self.request.min_mod_revision = revision;
        self
    }
    pub(crate) fn request(self, key: Vec<u8>) -> pb::RangeRequest {
        pb::RangeRequest {
            range_end: range_end(&key, self.prefix),
            key,
            ..self.request
        }
    }
}

/// How to write (etcd's `Put`).
#[derive(Clone, Debug, Default)]
pub struct PutOptions {
    request: pb::PutRequest,
}

impl PutOptions {
    pub fn new() -> PutOptions {
        PutOptions::default()
    }
    /// Attached to lease `id`: the key goes when the lease does.
    pub fn with_lease(mut self, id: i64) -> PutOptions {
        self.request.lease = id;
        self
    }
    pub(crate) fn request(self, key: Vec<u8>, value: Vec<u8>) -> pb::PutRequest {
        pb::PutRequest {
            key,
            value,
            ..self.request
        }
    }
}

/// How to delete (etcd's `DeleteRange`).
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    prefix: bool,
}

impl DeleteOptions {
    pub fn new() -> DeleteOptions {
        DeleteOptions::default()
    }
    /// Every key that starts with the key.
    pub fn with_prefix(mut self) -> DeleteOptions {
        self.prefix = true;
        self
    }
    pub(crate) fn request(self, key: Vec<u8>) -> pb::DeleteRangeRequest {
        pb::DeleteRangeRequest {
            range_end: range_end(&key, self.prefix),
            key,
            ..Default::default()
        }
    }
}

/// How to watch (etcd's `WatchCreateRequest`).
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    request: pb::WatchCreateRequest,
    prefix: bool,
}

impl WatchOptions {
    pub fn new() -> WatchOptions {
        WatchOptions::default()
    }
    /// Every key that starts with the key.
    pub fn with_prefix(mut self) -> WatchOptions {
        self.prefix = true;
        self
    }
    /// The changes from `revision` on (0: from now).
    pub fn with_start_revision(mut self, revision: i64) -> WatchOptions {
        self.request.start_revision = revision;
        self
    }
    pub(crate) fn request(self, key: Vec<u8>) -> pb::WatchRequest {
        pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
                pb::WatchCreateRequest {
                    range_end: range_end(&key, self.prefix),
                    key,
                    ..self.request
                },
            )),
        }
    }
}

/// How a comparison compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    Equal,
    Greater,
    Less,
    NotEqual,
}

impl CompareOp {
    fn result(self) -> i32 {
        use pb::compare::CompareResult;
        (match self {
            CompareOp::Equal => CompareResult::Equal,
            CompareOp::Greater => CompareResult::Greater,
            CompareOp::Less => CompareResult::Less,
            CompareOp::NotEqual => CompareResult::NotEqual,
        }) as i32
    }
}

/// A transaction's condition on a key (or every key under a prefix).
#[derive(Clone, Debug)]
pub struct Compare(pb::Compare);

impl Compare {
    fn new(
        key: impl Into<Vec<u8>>,
        op: CompareOp,
        target: pb::compare::CompareTarget,
        union: pb::compare::TargetUnion,
    ) -> Compare {
        Compare(pb::Compare {
            result: op.result(),
            target: target as i32,
            key: key.into(),
            range_end: Vec::new(),
            target_union: Some(union),
        })
    }
    /// The key's value against `value`.
    pub fn value(key: impl Into<Vec<u8>>, op: CompareOp, value: impl Into<Vec<u8>>) -> Compare {
        Compare::new(
            key,
            op,
            pb::compare::CompareTarget::Value,
            pb::compare::TargetUnion::Value(value.into()),
        )
    }
    /// The revision the key was last written at against `revision`.
    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Compare {
        Compare::new(
            key,
            op,
            pb::compare::CompareTarget::Mod,
            pb::compare::TargetUnion::ModRevision(revision),
        )
    }
    /// For every key under the key as a prefix (each must compare so).
    pub fn with_prefix(mut self) -> Compare {
        self.0.range_end = prefix_end(&self.0.key);
        self
    }
}

/// One operation of a transaction.
#[derive(Clone, Debug)]
pub struct TxnOp(pb::RequestOp);

impl TxnOp {
    fn of(request: pb::request_op::Request) -> TxnOp {
        TxnOp(pb::RequestOp {
            request: Some(request),
        })
    }
    pub fn get(key: impl Into<Vec<u8>>, options: Option<GetOptions>) -> TxnOp {
        TxnOp::of(pb::request_op::Request::RequestRange(
            options.unwrap_or_default().request(key.into()),
        ))
    }
    pub fn put(
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        options: Option<PutOptions>,
    ) -> TxnOp {
        TxnOp::of(pb::request_op::Request::RequestPut(
            options
                .unwrap_or_default()
                .request(key.into(), value.into()),
        ))
    }
    pub fn delete(key: impl Into<Vec<u8>>, options: Option<DeleteOptions>) -> TxnOp {
        TxnOp::of(pb::request_op::Request::RequestDeleteRange(
            options.unwrap_or_default().request(key.into()),
        ))
    }
}

/// A transaction: when every comparison holds, its `and_then` operations, all at one
/// revision.
#[derive(Clone, Debug, Default)]
pub struct Txn(pb::TxnRequest);

impl Txn {
    pub fn new() -> Txn {
        Txn::default()
    }
    pub fn when(mut self, compares: impl Into<Vec<Compare>>) -> Txn {
        self.0.compare = compares.into().into_iter().map(|c| c.0).collect();
        self
    }
    pub fn and_then(mut self, operations: impl Into<Vec<TxnOp>>) -> Txn {
        self.0.success = operations.into().into_iter().map(|o| o.0).collect();
        self
    }
    pub(crate) fn request(self) -> pb::TxnRequest {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prefix's range ends past every key that starts with it, as etcd's clients write it.
    #[test]
    fn a_prefix_ends_where_etcds_clients_end_it() {
        assert_eq!(prefix_end(b"/a/"), b"/a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
        assert_eq!(prefix_end(b""), b"\0");
        assert_eq!(prefix_end(b"\xff"), b"\0");
        let got = GetOptions::new().with_prefix().request(b"/x/".to_vec());
        assert_eq!(
            (got.key.as_slice(), got.range_end.as_slice()),
            (&b"/x/"[..], &b"/x0"[..])
        );
        assert!(GetOptions::new()
            .request(b"/x".to_vec())
            .range_end
            .is_empty());
        let compare = Compare::mod_revision("/p/", CompareOp::Less, 5).with_prefix();
        assert_eq!(compare.0.range_end, b"/p0");
        assert_eq!(compare.0.result, pb::compare::CompareResult::Less as i32);
    }
}
