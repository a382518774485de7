//! The `switchyard` binary: everything is in the library's `cli` module.

fn main() -> std::process::ExitCode {
    switchyard::cli::main()
}
