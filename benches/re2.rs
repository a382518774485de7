//! What counting RE2's program costs at load (`config::checks::re2::program_size`): route
//! regexes as configurations write them, counted 2,000 times each on one core, and loads of
//! 10,000 route configurations with a regex each against the same with a prefix each.
//!
//! `cargo bench --bench re2`; figures in docs/benchmarks.md.

use std::time::Instant;

use switchyard::config::checks::re2::program_size;

const PATTERNS: &[&str] = &[
    "^/api/v[0-9]+/users/[a-z0-9-]{1,36}$",
    "^/static/[a-z0-9-]{1,8}/[a-z0-9-]{1,8}\\.(css|js|png)$",
    "^/(en|de|fr|es|it)/products/[0-9]+$",
    "(?i)^/healthz?$",
    "^/v1/orders/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}$",
    "\\.(jpg|jpeg|gif|png|webp)$",
    "^/(api|admin)/.*",
    "^/users/(?P<id>[0-9]+)/profile$",
    "x{0,48}",
    "^/static/[a-z0-9-]{1,64}/[a-z0-9-]{1,64}\\.(css|js|png)$",
];

fn main() {
    let rounds = 2_000;
    let mut total = 0u64;
    let start = Instant::now();
    for _ in 0..rounds {
        for p in PATTERNS {
            total += program_size(p).expect("valid");
        }
    }
    let elapsed = start.elapsed();
    let count = (rounds * PATTERNS.len()) as f64;
    println!(
        "re2 program size: {} patterns x {rounds}: {:.1} us per pattern (sizes summed {total})",
        PATTERNS.len(),
        elapsed.as_secs_f64() * 1e6 / count
    );
    for p in PATTERNS {
        println!("  {:>5}  {p}", program_size(p).expect("valid"));
    }

    // Loads of 10,000 route configurations: a regex each, against a prefix each.
    let dir = tempfile::tempdir().expect("tempdir");
    for (kind, matcher) in [
        ("prefix", "{ prefix: \"/api/v1/svc{i}/\" }"),
        (
            "regex",
            "{ safe_regex: { regex: \"^/api/v[0-9]+/svc{i}/[a-z0-9-]{1,12}(/items/[0-9]+)?$\" } }",
        ),
    ] {
        let mut text = String::from("routes:\n");
        for i in 0..10_000 {
            let m = matcher.replace("{i}", &i.to_string());
            text.push_str(&format!(
                "  - name: r{i}\n    virtual_hosts: [{{ name: a, domains: [\"*\"], routes: \
                 [{{ match: {m}, direct_response: {{ status: 200 }} }}] }}]\n"
            ));
        }
        let sub = dir.path().join(kind);
        std::fs::create_dir_all(&sub).expect("mkdir");
        std::fs::write(sub.join("routes.yaml"), text).expect("write");
        let mut best = f64::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            let loaded = switchyard::config::load(
                std::slice::from_ref(&sub),
                &switchyard::config::LoadOptions::default(),
            );
            best = best.min(start.elapsed().as_secs_f64());
            assert!(
                loaded.is_ok(),
                "{kind}: {:?}",
                loaded.err().map(|f| f.errors.len())
            );
        }
        println!(
            "load of 10,000 route configurations, a {kind} each: best of 5 {:.0} ms",
            best * 1e3
        );
    }
}
