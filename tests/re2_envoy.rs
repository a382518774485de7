//! RE2's program size as Switchyard counts it (`config::checks::re2`)
//! against the real Envoy 1.40, pattern by pattern: 2,500 generated patterns (literals in
//! and beyond ASCII, escapes, classes with ranges, negation, POSIX and Unicode groups, case
//! folding, groups of every kind, alternations with common prefixes, counted and lazy
//! repetitions, anchors, flags) go into one route configuration; `envoy --mode validate`
//! with its runtime's warn level at 0 logs each regex's program size ("regex '...' RE2
//! program size of N > max program size of 0 set for the warn level threshold"). Every
//! count must be Envoy's, so every verdict against any limit is Envoy's too.
//!
//! Envoy 1.40 gives RE2 its pattern as Latin-1 (a pattern's bytes are its characters:
//! `\x{100}` is refused, `\pL` is the letters below 256), and so does Switchyard; the
//! patterns hold UTF-8 text beyond ASCII all the same, as configurations do.
//!
//! What Switchyard refuses as syntax is left out of the batch (Envoy would refuse all of it)
//! and checked apart: a sample of every kind of refusal goes to Envoy one by one, which must
//! refuse it in the same words.
//!
//! And end to end: a runtime served over RTDS raises the limit for a real Envoy as
//! Switchyard judges it.
//!
//! The seed is printed; `SWITCHYARD_RE2_SEED` runs another, `SWITCHYARD_RE2_PATTERNS` more
//! patterns.

use switchyard_testkit as support;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use support::envoy::{envoy_binary, eventually, free_port, http_get, Envoy, Switchyard};

const HCM: &str =
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";
const ROUTER: &str = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router";

/// A small seeded generator (xorshift64*): the same seed, the same patterns.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const LITERALS: &[&str] = &[
    "a", "b", "c", "x", "z", "A", "K", "S", "k", "s", "0", "7", "-", "_", "/", "=", "%", "~", ",",
    ":", "é", "ß", "Ω", "ж", "日", "€", "😀", "\u{212A}", "ſ", "ǅ", "İ", "µ",
];
const ESCAPES: &[&str] = &[
    r"\.",
    r"\/",
    r"\-",
    r"\*",
    r"\+",
    r"\?",
    r"\(",
    r"\)",
    r"\[",
    r"\]",
    r"\{",
    r"\}",
    r"\|",
    r"\^",
    r"\$",
    r"\\",
    r"\n",
    r"\t",
    r"\x41",
    r"\x{e9}",
    r"\xff",
    r"\x{FF}",
    r"\101",
    r"\d",
    r"\D",
    r"\w",
    r"\W",
    r"\s",
    r"\S",
    r"\pN",
    r"\p{Greek}",
    r"\PL",
    r"\p{Lu}",
    r"\p{^Greek}",
    r"\pZ",
    r"\p{Cyrillic}",
    r"\p{Nd}",
    r"\p{Any}",
    r"\C",
    r"\Qa.b\E",
];
const CLASS_ITEMS: &[&str] = &[
    "a",
    "z",
    "-",
    "_",
    ".",
    "/",
    "é",
    "Ω",
    "日",
    "a-z",
    "A-Z",
    "0-9",
    "a-f",
    "A-F",
    "α-ω",
    " -~",
    "\\x00-\\xff",
    "\\x80-\\x{ff}",
    "k",
    "K",
    "\\d",
    "\\w",
    "\\s",
    "\\W",
    "[:alpha:]",
    "[:digit:]",
    "[:^space:]",
    "[:punct:]",
    "\\p{Greek}",
    "\\pN",
    "\\n",
    "\\]",
    "^",
];
const ANCHORS: &[&str] = &["^", "$", r"\A", r"\z", r"\b", r"\B"];
const FLAGS: &[&str] = &["(?i)", "(?s)", "(?m)", "(?U)", "(?i-s)", "(?is)", "(?-i)"];

struct Gen {
    rng: Rng,
    /// Repetition left, so that nested counts stay within RE2's 1000.
    budget: u32,
}

impl Gen {
    fn class(&mut self) -> String {
        let mut s = String::from("[");
        if self.rng.chance(25) {
            s.push('^');
        }
        for _ in 0..1 + self.rng.below(4) {
            s.push_str(self.rng.pick(CLASS_ITEMS));
        }
        s.push(']');
        s
    }

    fn atom(&mut self, depth: usize) -> String {
        match self.rng.below(if depth > 1 { 6 } else { 8 }) {
            0 | 1 => self.rng.pick(LITERALS).to_string(),
            2 => self.rng.pick(ESCAPES).to_string(),
            3 => ".".to_string(),
            4 | 5 => self.class(),
            _ => {
                let open = self
                    .rng
                    .pick(&["(", "(?:", "(?P<n>", "(?i:", "(?s:", "(?U:", "("]);
                let open = if open == "(?P<n>" {
                    format!("(?P<n{}>", self.rng.below(1000))
                } else {
                    open.to_string()
                };
                format!("{open}{})", self.alternation(depth + 1))
            }
        }
    }

    fn piece(&mut self, depth: usize) -> String {
        if self.rng.chance(6) {
            return self.rng.pick(ANCHORS).to_string();
        }
        let saved = self.budget;
        let (op, factor) = self.quantifier();
        self.budget /= factor.max(1);
        let atom = self.atom(depth);
        self.budget = saved;
        format!("{atom}{op}")
    }

    /// A quantifier (or none), and how many copies it may make.
    fn quantifier(&mut self) -> (String, u32) {
        let lazy = if self.rng.chance(20) { "?" } else { "" };
        match self.rng.below(12) {
            0..=4 => (String::new(), 1),
            5 => (format!("*{lazy}"), 1),
            6 => (format!("+{lazy}"), 1),
            7 => (format!("?{lazy}"), 1),
            _ => {
                let cap = self
                    .budget
                    .clamp(1, if self.rng.chance(20) { 70 } else { 12 });
                let n = self.rng.below(cap as usize + 1) as u32;
                let m = n + self.rng.below((cap - n.min(cap)) as usize + 1) as u32;
                let (text, copies) = match self.rng.below(3) {
                    0 => (format!("{{{n}}}"), n),
                    1 => (format!("{{{n},}}"), n.max(1)),
                    _ => (format!("{{{n},{m}}}"), m),
                };
                if copies > self.budget {
                    return (String::new(), 1);
                }
                (format!("{text}{lazy}"), copies)
            }
        }
    }

    fn concatenation(&mut self, depth: usize) -> String {
        (0..1 + self.rng.below(4))
            .map(|_| self.piece(depth))
            .collect()
    }

    fn alternation(&mut self, depth: usize) -> String {
        let n = if depth > 1 { 1 } else { 1 + self.rng.below(3) };
        if n > 1 && self.rng.chance(40) {
            // Alternatives that share a literal or a class at the front (RE2 factors them).
            let prefix = if self.rng.chance(50) {
                (0..1 + self.rng.below(3))
                    .map(|_| self.rng.pick(LITERALS))
                    .collect::<String>()
            } else {
                self.class()
            };
            return (0..n + 1)
                .map(|_| format!("{prefix}{}", self.concatenation(depth)))
                .collect::<Vec<_>>()
                .join("|");
        }
        (0..n)
            .map(|_| self.concatenation(depth))
            .collect::<Vec<_>>()
            .join("|")
    }

    fn pattern(&mut self) -> String {
        self.budget = 1000;
        let mut p = String::new();
        if self.rng.chance(15) {
            p.push_str(self.rng.pick(FLAGS));
        }
        if self.rng.chance(20) {
            p.push('^');
            if self.rng.chance(50) {
                p.push_str("/static/");
            }
        }
        p.push_str(&self.alternation(0));
        if self.rng.chance(15) {
            p.push('$');
        }
        p
    }
}

/// Each pattern's program size as Envoy logs it, from one `envoy --mode validate`.
fn envoy_sizes(envoy: &Path, patterns: &[String], dir: &Path) -> BTreeMap<String, u64> {
    let routes: Vec<_> = patterns
        .iter()
        .map(|p| json!({"match": {"safe_regex": {"regex": p}}, "direct_response": {"status": 200}}))
        .collect();
    let bootstrap = json!({
        "layered_runtime": {"layers": [{"name": "static", "static_layer": {
            "re2.max_program_size.error_level": 100_000_000u64,
            "re2.max_program_size.warn_level": 0}}]},
        "static_resources": {"listeners": [{"name": "l",
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
            "filter_chains": [{"filters": [{"name": "hcm", "typed_config": {
                "@type": HCM, "stat_prefix": "s",
                "route_config": {"virtual_hosts": [{"name": "all", "domains": ["*"], "routes": routes}]},
                "http_filters": [{"name": "router", "typed_config": {"@type": ROUTER}}]}}]}]}]}
    });
    let path = dir.join("bootstrap.json");
    std::fs::write(&path, serde_json::to_vec(&bootstrap).expect("json")).expect("write");
    let mut child = Command::new(envoy)
        .args(["--mode", "validate", "--disable-hot-restart", "-l", "warn"])
        .args(["--log-format", "%v", "-c"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("envoy runs");
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).map(|_| text)
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("envoy --mode validate took over 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = reader.join().expect("reader").expect("utf-8 log");
    assert!(
        status.success(),
        "Envoy refused a pattern Switchyard counts (a syntax RE2 refuses?):\n{}",
        log.lines().rev().take(5).collect::<Vec<_>>().join("\n")
    );
    let mut sizes = BTreeMap::new();
    let marker = "' RE2 program size of ";
    for line in log.lines() {
        let Some(rest) = line.strip_prefix("regex '") else {
            continue;
        };
        let Some(at) = rest.rfind(marker) else {
            continue;
        };
        let pattern = &rest[..at];
        let size: u64 = rest[at + marker.len()..]
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no size in {line}"));
        sizes.insert(pattern.to_string(), size);
    }
    sizes
}

/// The seed and the number of patterns.
fn parameters() -> (u64, usize) {
    let seed: u64 = std::env::var("SWITCHYARD_RE2_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_0033);
    let count: usize = std::env::var("SWITCHYARD_RE2_PATTERNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2500);
    (seed, count)
}

#[test]
fn syntax_refusals_are_envoys() {
    let Some(envoy) = envoy_binary() else { return };
    let (seed, count) = parameters();
    let mut gen = Gen {
        rng: Rng(seed ^ 0x9E37_79B9_7F4A_7C15),
        budget: 1000,
    };
    // Up to three patterns for each kind of refusal (RE2's words up to the colon).
    let mut kinds: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for _ in 0..count {
        let p = gen.pattern();
        if let Err(refused) = switchyard::config::checks::re2::program_size(&p) {
            let words = refused.to_string();
            let kind = words.split(':').next().unwrap_or_default().to_string();
            let samples = kinds.entry(kind).or_default();
            if samples.len() < 3 {
                samples.push((p, words));
            }
        }
    }
    eprintln!(
        "re2 syntax: seed {seed}, kinds of refusal {:?}",
        kinds.keys()
    );
    assert!(kinds.len() >= 4, "few kinds of refusal: {:?}", kinds.keys());
    let mut disagreements = Vec::new();
    for (pattern, words) in kinds.into_values().flatten() {
        let bootstrap = json!({"static_resources": {"listeners": [{"name": "l",
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
            "filter_chains": [{"filters": [{"name": "hcm", "typed_config": {
                "@type": HCM, "stat_prefix": "s",
                "route_config": {"virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [
                    {"match": {"safe_regex": {"regex": pattern}}, "direct_response": {"status": 200}}]}]},
                "http_filters": [{"name": "router", "typed_config": {"@type": ROUTER}}]}}]}]}]}});
        let verdict = switchyard::preflight::run_envoy(
            &envoy,
            &bootstrap,
            switchyard::preflight::DEFAULT_TIMEOUT,
        )
        .expect("Envoy runs");
        match verdict {
            // Envoy's words come trimmed at the end.
            Err(theirs) if theirs.contains(words.trim_end()) => {}
            other => disagreements.push(format!("{pattern:?}: ours {words:?}, Envoy {other:?}")),
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

#[test]
fn program_sizes_are_envoys_on_generated_patterns() {
    let Some(envoy) = envoy_binary() else { return };
    let (seed, count) = parameters();
    eprintln!("re2 differential: seed {seed}, {count} patterns");
    let mut gen = Gen {
        rng: Rng(seed ^ 0x9E37_79B9_7F4A_7C15),
        budget: 1000,
    };
    let mut patterns = Vec::new();
    let mut ours = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut refused = 0;
    let mut attempts = 0;
    while patterns.len() < count {
        attempts += 1;
        assert!(
            attempts < count * 10,
            "the generator makes too few patterns"
        );
        let p = gen.pattern();
        if !seen.insert(p.clone()) {
            continue;
        }
        // What Switchyard refuses as syntax stays out: Envoy would refuse the whole batch.
        match switchyard::config::checks::re2::program_size(&p) {
            Ok(size) => {
                patterns.push(p);
                ours.push(size);
            }
            Err(_) => refused += 1,
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let theirs = envoy_sizes(&envoy, &patterns, dir.path());
    let mut mismatches = Vec::new();
    let mut over_default = 0;
    for (p, &ours) in patterns.iter().zip(&ours) {
        match theirs.get(p) {
            Some(&size) if size == ours => {
                if size > switchyard::config::checks::re2::DEFAULT_MAX_PROGRAM_SIZE {
                    over_default += 1;
                }
            }
            other => mismatches.push(format!("{p:?}: Switchyard {ours}, Envoy {other:?}")),
        }
    }
    eprintln!(
        "{} patterns ({over_default} over Envoy's default limit of 100; {refused} generated \
         ones Switchyard refuses as syntax, left out); {} mismatches",
        patterns.len(),
        mismatches.len()
    );
    assert!(
        over_default > count / 10 && over_default < count * 9 / 10,
        "both verdicts well represented: {over_default} of {count} over the limit"
    );
    assert!(
        mismatches.is_empty(),
        "seed {seed}: {} of {} patterns count differently:\n{}",
        mismatches.len(),
        patterns.len(),
        mismatches
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A runtime in the files raises the RE2 limit for the nodes that get it,
/// end to end: Switchyard serves a regex of 125 instructions with an RTDS runtime at 200,
/// and a real Envoy whose bootstrap names that runtime as a layer takes both (ACKs, and
/// answers through the route). At 110 the load is refused in Envoy's words and the last
/// good generation keeps serving.
#[tokio::test]
async fn a_runtime_served_over_rtds_raises_the_limit_for_a_real_envoy() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("mkdir");
    let port = free_port();
    let runtime = |limit: u32| {
        format!("runtimes:\n  - name: limits\n    layer: {{ re2: {{ max_program_size: {{ error_level: {limit} }} }} }}\n")
    };
    std::fs::write(config.join("runtimes.yaml"), runtime(200)).expect("write");
    std::fs::write(
        config.join("listeners.yaml"),
        format!(
            r#"listeners:
  - name: web
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
      - filters:
          - name: envoy.filters.network.http_connection_manager
            typed_config:
              "@type": {HCM}
              stat_prefix: web
              route_config:
                name: web
                virtual_hosts:
                  - name: all
                    domains: ["*"]
                    routes:
                      - match: {{ safe_regex: {{ regex: "/x{{0,60}}" }} }}
                        direct_response: {{ status: 200, body: {{ inline_string: "matched" }} }}
              http_filters:
                - name: envoy.filters.http.router
                  typed_config: {{ "@type": {ROUTER} }}
"#
        ),
    )
    .expect("write");
    assert_eq!(
        switchyard::config::checks::re2::program_size("/x{0,60}"),
        Ok(125)
    );
    let server = Switchyard::start(&config, dir.path()).await;
    let loaded = eventually(Duration::from_secs(30), || async {
        server
            .status()
            .await
            .and_then(|s| s.config)
            .is_some_and(|c| c.ok && c.generation == 1)
    })
    .await;
    assert!(loaded.is_some(), "the files load under the runtime's 200");

    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/envoy/bootstrap-ads.yaml");
    let bootstrap = std::fs::read_to_string(example).expect("example bootstrap")
        + "layered_runtime:\n  layers:\n    - name: limits\n      rtds_layer:\n        name: limits\n        rtds_config: { resource_api_version: V3, ads: {} }\n";
    let node = "re2-runtime";
    let envoy_dir = dir.path().join("envoy");
    std::fs::create_dir(&envoy_dir).expect("mkdir");
    let envoy = Envoy::start_from_text(&bootstrap, &envoy_bin, server.port, node, &envoy_dir).await;
    let answered = eventually(Duration::from_secs(30), || async {
        http_get(port).await.is_some_and(|body| body == "matched")
    })
    .await;
    assert!(
        answered.is_some(),
        "Envoy never answered through the regex route\n{}",
        envoy.process.log_text()
    );
    assert!(server.node_synced(node).await, "every type ACKed");

    // At 110 the regex is over the limit: the load is refused, the last good one serves.
    std::fs::write(config.join("runtimes.yaml"), runtime(110)).expect("write");
    let refused = eventually(Duration::from_secs(30), || async {
        server
            .status()
            .await
            .and_then(|s| s.config)
            .is_some_and(|c| {
                !c.ok
                    && c.errors
                        .iter()
                        .any(|e| e.contains("RE2 program size of 125 > max program size of 110"))
            })
    })
    .await;
    assert!(refused.is_some(), "the load under 110 is refused");
    assert_eq!(http_get(port).await.as_deref(), Some("matched"));
}
