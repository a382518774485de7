//! The REST-JSON `DiscoveryRequest` decoder on arbitrary bytes: a request or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = switchyard::server::rest::parse_request(data);
});
