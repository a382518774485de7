//! Memory figures for the soak test and the benchmarks: the live heap, counted by a global
//! allocator (`#[global_allocator] static A: memory::Counting = memory::Counting;` in the
//! crate that wants it), and a process's resident memory from /proc.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts live heap bytes (allocated and not yet freed), which, unlike RSS, falls back when
/// memory is freed: the allocator keeps freed pages for reuse.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged and only counts bytes.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}

/// The live heap, in KiB, when [`Counting`] is the global allocator.
pub fn live_kib() -> usize {
    LIVE.load(Ordering::Relaxed) / 1024
}

/// The resident memory (VmRSS) of process `pid` (`self` for this one), in KiB; 0 if unknown.
pub fn rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}
