//! Program sizes the real Envoy 1.40 reported (`re2.max_program_size.warn_level: 0` makes it
//! log every regex's size); `tests/re2_envoy.rs` compares thousands more.

use super::program_size;

#[test]
fn sizes_as_envoy_reports_them() {
    for (pattern, size) in [
        ("x{0,50}", 104),
        (
            r"^/static/[a-z0-9-]{1,64}/[a-z0-9-]{1,64}\.(css|js|png)$",
            526,
        ),
        ("abc", 7),
    ] {
        assert_eq!(program_size(pattern), Ok(size), "{pattern}");
    }
}
