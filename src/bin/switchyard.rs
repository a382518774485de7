//! The `switchyard` binary: everything is in the library's `cli` module.

/// jemalloc: under a fleet-wide push glibc's malloc spent a fifth of the server's CPU
/// (docs/benchmarks.md, "The allocator").
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    switchyard::cli::main()
}
