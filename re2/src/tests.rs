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

/// A pattern nests as deep as a user writes it; the count recurses as deep (the sizes are
/// Envoy 1.40's, logged with its warn level at 0). On a thread with
/// the 2 MiB stack of a loader or tokio thread, deep patterns are counted (on a thread of
/// their own), and past `MAX_NESTING` refused, never overflowing the caller's stack.
#[test]
fn deep_patterns_are_counted_without_overflowing_the_callers_stack() {
    let nested = |n: usize| format!("{}a{}", "(".repeat(n), ")".repeat(n));
    let cases: Vec<(String, Result<u64, &str>)> = vec![
        ("x{0,1000}".into(), Ok(2004)),
        ("(?:x{0,10}){0,100}".into(), Ok(2103)),
        (nested(1000), Ok(2005)),
        (nested(9000), Ok(18005)),
        (
            nested(super::MAX_NESTING + 1),
            Err("parentheses nested 10001 deep"),
        ),
    ];
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            for (pattern, expected) in cases {
                let got = program_size(&pattern);
                let short: String = pattern.chars().take(24).collect();
                match expected {
                    Ok(size) => assert_eq!(got, Ok(size), "{short}"),
                    Err(words) => assert!(
                        got.as_ref().is_err_and(|e| e.message().contains(words)),
                        "{short}: {got:?}"
                    ),
                }
            }
        })
        .expect("spawn")
        .join()
        .expect("no overflow, no panic");
}

/// Bad input of every shape gets a count or RE2's words, never a panic: random strings over
/// RE2's metacharacters and a few others (bounded: 20,000 patterns of up to 24 characters).
#[test]
fn random_patterns_never_panic() {
    const ALPHABET: &[&str] = &[
        "(", ")", "[", "]", "{", "}", "|", "*", "+", "?", "^", "$", ".", "\\", "-", ",", ":", "<",
        ">", "P", "p", "x", "Q", "E", "C", "z", "A", "b", "d", "w", "s", "0", "1", "9", "a", "é",
        "\u{0}", "=", "!", "i", "U", "s", "m", "{", "}", "^",
    ];
    let mut state: u64 = 0x33_5EED;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let len = (next() % 24) as usize;
        let pattern: String = (0..len)
            .map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize])
            .collect();
        let outcome = std::panic::catch_unwind(|| program_size(&pattern));
        assert!(outcome.is_ok(), "panicked on {pattern:?}");
    }
}
