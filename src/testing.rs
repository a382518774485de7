//! Helpers for the unit tests.

/// A small deterministic random source (xorshift64): `rng(seed)(n)` is in `0..n`. Tests that
/// feed random operation sequences use it so that a failure replays exactly.
pub fn rng(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}
