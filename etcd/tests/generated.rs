//! The code in src/generated/ is what tonic-prost-build makes of etcd's .proto files (the ones
//! etcd-client 0.21.1 ships): regenerated here and compared byte for byte. With
//! `SWITCHYARD_REGENERATE=1` the test writes it instead (after upgrading etcd-client in
//! Cargo.toml, say); that is the only way the directory is meant to change.
//!
//! Runs protoc (Debian's protobuf-compiler, which the README's test command installs), as
//! only this test does: building and installing Switchyard need none.

use std::path::{Path, PathBuf};

/// The .proto files Switchyard's client uses, under the crate's `proto/` directory.
const PROTOS: &[&str] = &[
    "etcd/api/etcdserverpb/rpc.proto",
    "etcd/api/mvccpb/kv.proto",
    "etcd/api/authpb/auth.proto",
];

/// What `cargo args` prints, run in this crate.
fn cargo(args: &[&str]) -> String {
    let out = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// etcd-client's `proto/` directory, where Cargo unpacked the crate.
fn protos() -> PathBuf {
    let metadata: serde_json::Value =
        serde_json::from_str(&cargo(&["metadata", "--format-version", "1", "--locked"]))
            .expect("metadata");
    let package = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "etcd-client")
        .expect("etcd-client among the packages");
    Path::new(package["manifest_path"].as_str().expect("manifest path"))
        .parent()
        .expect("its directory")
        .join("proto")
}

fn generate(into: &Path) {
    let root = protos();
    let files: Vec<PathBuf> = PROTOS.iter().map(|p| root.join(p)).collect();
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .out_dir(into)
        .compile_protos(&files, &[root])
        .expect("etcd's .proto files compile");
    // The options' packages the files import (google.api, openapiv2) carry nothing the
    // client uses.
    for entry in std::fs::read_dir(into).expect("generated") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !KEPT.contains(&name) {
            std::fs::remove_file(&path).expect("remove");
        }
    }
}

/// The generated files the client is built on.
const KEPT: &[&str] = &["authpb.rs", "etcdserverpb.rs", "mvccpb.rs"];

#[test]
fn the_generated_code_is_what_etcds_proto_files_make() {
    let kept = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/generated");
    if std::env::var_os("SWITCHYARD_REGENERATE").is_some() {
        generate(&kept);
        return;
    }
    let fresh = tempfile::tempdir().expect("tempdir");
    generate(fresh.path());
    let mut names: Vec<String> = std::fs::read_dir(fresh.path())
        .expect("generated")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut kept_names: Vec<String> = std::fs::read_dir(&kept)
        .expect("src/generated")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    kept_names.sort();
    assert_eq!(names, kept_names, "the files generated");
    for name in names {
        let want = std::fs::read(fresh.path().join(&name)).expect("read");
        let have = std::fs::read(kept.join(&name)).expect("read");
        assert!(
            want == have,
            "src/generated/{name} is not what etcd's .proto files make: regenerate it with \
             SWITCHYARD_REGENERATE=1 cargo test -p switchyard-etcd --test generated"
        );
    }
}

/// What `cargo build` and `cargo install` compile (every workspace member's normal and build
/// dependencies, dev-dependencies aside) has no crate that runs protoc: the build needs
/// none (`PROTOC=/nonexistent cargo build --release --locked` succeeds on a clean target).
#[test]
fn nothing_the_build_compiles_runs_protoc() {
    let tree = cargo(&[
        "tree",
        "--workspace",
        "--locked",
        "--edges",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}",
    ]);
    assert!(
        tree.lines().any(|l| l.starts_with("switchyard-etcd ")),
        "{tree}"
    );
    let protoc: Vec<&str> = tree
        .lines()
        .filter(|l| {
            [
                "prost-build ",
                "tonic-build ",
                "tonic-prost-build ",
                "etcd-client ",
                "protoc",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .collect();
    assert!(
        protoc.is_empty(),
        "crates the build compiles that run protoc: {protoc:?}"
    );
}
