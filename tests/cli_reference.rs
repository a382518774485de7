//! The command-line reference, `docs/cli.md`, is generated from the CLI's own definitions
//! (clap's, through `clap-markdown`): this test fails when it is stale, and with
//! `SWITCHYARD_WRITE_CLI_DOCS=1` writes it anew.

const HEADER: &str = "<!-- Generated from the CLI's definitions by tests/cli_reference.rs: \
do not edit. SWITCHYARD_WRITE_CLI_DOCS=1 cargo test --test cli_reference writes it. -->\n\n";

#[test]
fn the_cli_reference_is_generated_from_the_cli() {
    let generated = format!(
        "{HEADER}{}",
        clap_markdown::help_markdown::<switchyard::cli::Cli>()
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/cli.md");
    if std::env::var_os("SWITCHYARD_WRITE_CLI_DOCS").is_some() {
        std::fs::write(&path, &generated).expect("write docs/cli.md");
        return;
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == generated,
        "docs/cli.md is stale: run `SWITCHYARD_WRITE_CLI_DOCS=1 cargo test --test \
         cli_reference` and commit it"
    );
    // Every subcommand is there.
    for command in [
        "serve", "validate", "diff", "status", "rollout", "import", "loadgen",
    ] {
        assert!(
            generated.contains(&format!("## `switchyard {command}`")),
            "{command} is not in the reference"
        );
    }
}
