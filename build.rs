//! Build script: select the protobuf descriptor set that drives the YAML/JSON -> protobuf
//! mapping.
//!
//! Why a committed file: Switchyard turns snapshot files into Envoy protobufs through a
//! `prost_reflect::DescriptorPool`, so every Envoy type and every `Any` with an `"@type"`
//! works without per-type code. The pool must describe exactly the messages that the
//! `envoy-types` crate was generated from, or the bytes we send would not match the types we
//! decode with. `envoy-types` builds that very set (`src/generated/types.bin`, 514 files)
//! but does not export it, and a build script cannot reliably reach a dependency's sources
//! (vendoring, alternative registries). Compiling the .proto files again would need `protoc`
//! and the full Envoy/xDS/googleapis/validate tree. So we hold a copy of that file in
//! `proto/`, named by the `envoy-types` version it came from, and this script refuses to
//! build when `Cargo.lock` pins a different `envoy-types`: upgrading the crate then means
//! copying its `types.bin` to `proto/envoy-types-<version>.descriptor-set.bin`.
//! A test (`config::descriptors`) checks that the pool and the generated types agree.

use std::{env, fs, path::PathBuf};

/// The envoy-types version whose descriptor set is in proto/.
const SHIPPED_VERSION: &str = "0.7.7";

fn main() {
    let root =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
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
        "cargo:rustc-env=SWITCHYARD_DESCRIPTOR_SET={}",
        file.display()
    );
    println!("cargo:rustc-env=SWITCHYARD_ENVOY_TYPES_VERSION={version}");
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
