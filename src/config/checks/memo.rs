//! Verdicts on bytes that recur, remembered (here, and in `config::server_secrets` by a
//! resource's version): the same CA bundle inline in every cluster, the
//! same Lua script on every route, the same PKCS#12 bundle or JWKS on every listener are
//! judged once per process, not once per resource and load (a 220 KB CA bundle costs about
//! 2 ms to judge).
//!
//! Owns: the tables, keyed by a 128-bit digest of the bytes judged (and of the words' source).
//! Must not: judge; the checks pass the judgement in, and a table never changes a verdict
//! (a table that fills is emptied, and judges again).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;

use foldhash::quality::FixedState;

/// The most verdicts a table keeps before it is emptied.
const CAPACITY: usize = 1024;

/// One kind of verdict's table.
pub(in crate::config) struct Memo<T> {
    table: Mutex<Option<HashMap<u128, T>>>,
}

impl<T: Clone> Memo<T> {
    pub const fn new() -> Self {
        Memo {
            table: Mutex::new(None),
        }
    }

    /// The verdict on `parts` (the bytes, and what else the verdict depends on), judged by
    /// `judge` the first time.
    pub fn get(&self, parts: &[&[u8]], judge: impl FnOnce() -> T) -> T {
        let key = digest(parts);
        if let Some(known) = self.lock().as_ref().and_then(|t| t.get(&key).cloned()) {
            return known;
        }
        let verdict = judge();
        let mut table = self.lock();
        let table = table.get_or_insert_with(HashMap::new);
        if table.len() >= CAPACITY {
            table.clear();
        }
        table.insert(key, verdict.clone());
        verdict
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<HashMap<u128, T>>> {
        // A judgement that panicked held no lock; the table is only a cache either way.
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Two independent 64-bit digests of the parts, each part's length first.
fn digest(parts: &[&[u8]]) -> u128 {
    let half = |seed: u64| {
        let mut hasher = FixedState::with_seed(seed).build_hasher();
        for part in parts {
            hasher.write_usize(part.len());
            hasher.write(part);
        }
        hasher.finish()
    };
    u128::from(half(0x5157_6974_6368_7961)) << 64 | u128::from(half(0x7264_2d62_7974_6573))
}

#[cfg(test)]
mod tests {
    use super::Memo;
    use std::cell::Cell;

    #[test]
    fn a_verdict_is_judged_once_per_bytes_and_source() {
        let memo: Memo<usize> = Memo::new();
        let judged = Cell::new(0);
        let judge = |n: usize| {
            judged.set(judged.get() + 1);
            n
        };
        assert_eq!(memo.get(&[b"a", b"<inline>"], || judge(1)), 1);
        assert_eq!(memo.get(&[b"a", b"<inline>"], || judge(2)), 1);
        assert_eq!(judged.get(), 1);
        // Other bytes, or the same bytes from another source, are judged again.
        assert_eq!(memo.get(&[b"b", b"<inline>"], || judge(3)), 3);
        assert_eq!(memo.get(&[b"a", b"/etc/ca.pem"], || judge(4)), 4);
        // The parts' boundaries count: ("ab", "") is not ("a", "b").
        assert_eq!(memo.get(&[b"ab", b""], || judge(5)), 5);
        assert_eq!(memo.get(&[b"a", b"b"], || judge(6)), 6);
        assert_eq!(judged.get(), 5);
    }
}
