//! The snapshot loader on arbitrary text, as YAML and as JSON: it must answer with a
//! snapshot file or errors, never panic or hang.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = switchyard::config::load_text(Path::new("fuzz.yaml"), text);
        let _ = switchyard::config::load_text(Path::new("fuzz.json"), text);
    }
});
