//! Fleet-scale figures: `cargo bench --bench fleet`.
//!
//! What it measures, on generated snapshot files (N EDS clusters with their endpoints, split
//! into files of 1,000):
//! 1. `config::load` of all files (parse, map to protobuf, encode once, hash);
//! 2. building a node group's snapshot from a loaded config, and the memoized lookup;
//! 3. S SotW streams each answered a wildcard CDS of N clusters (the per-stream cost of
//!    sending shared, already-encoded resources), and resident memory before and after;
//! 4. one cluster changed: the cost, per stream, to decide and build the new CDS + EDS.
//! 5. the same over delta: D delta streams take wildcard CDS and all EDS names; then one
//!    cluster changes and each stream decides, builds and encodes its CDS (1 cluster) and EDS
//!    (the 1 ClusterLoadAssignment re-sent for warming); the cost must follow what changed.
//!
//! 6. make-before-break: the same delta streams with ordering on and off take an
//!    endpoints-only change (no plan: the same one response) and a route cut-over that
//!    removes a cluster (a plan, computed once per node group).
//!
//! 7. LEDS (P34): the same D delta streams subscribed to one glob collection of N hosts;
//!    one host changes, and each stream sends exactly that one LbEndpoint.
//!
//! Each timing is the median of 5 runs. Bounded: N, S and D are 10,000, 1,000 and 200 unless
//! `FLEET_CLUSTERS`, `FLEET_STREAMS` and `FLEET_DELTA_STREAMS` say otherwise; with those it
//! runs in well under a minute on the 2-core machine. Results and method:
//! docs/benchmarks.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use prost::Message;
use switchyard::cache::Cache;
use switchyard::config::{self, LoadOptions};
use switchyard::protocol::{DeltaStream, Ordering, SotwStream, Variant};
use switchyard::resource::ResourceType;
use switchyard::resource::Secrets;
use switchyard::server::{WireDeltaResponse, WireResponse};

/// A size from the environment (`FLEET_CLUSTERS`, `FLEET_STREAMS`, `FLEET_DELTA_STREAMS`), or
/// its default: 10,000 clusters, 1,000 SotW streams, 200 delta streams (which hold what their
/// client has, name -> version: ~1.4 MiB each at 20,000 resources). The clusters are a
/// multiple of 1,000 (one file each).
fn size(var: &str, default: usize) -> usize {
    match std::env::var(var) {
        Ok(v) => match v.parse() {
            Ok(n) if n > 0 => n,
            _ => panic!("{var}={v:?}: not a positive number"),
        },
        Err(_) => default,
    }
}

fn clusters() -> usize {
    let n = size("FLEET_CLUSTERS", 10_000);
    assert!(
        n.is_multiple_of(1000),
        "FLEET_CLUSTERS={n}: not a multiple of 1,000"
    );
    n
}
const RUNS: usize = 5;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

// Live heap: counted exactly, so per-stream state is measured (RSS does not shrink when
// earlier sections free memory, and reuses it).
#[path = "../tests/support/memory.rs"]
mod memory;

#[global_allocator]
static ALLOCATOR: memory::Counting = memory::Counting;

use memory::live_kib;

fn rss_kib() -> u64 {
    memory::rss_kib("self")
}

fn write_files(dir: &std::path::Path, timeout: impl Fn(usize) -> &'static str) {
    write_mesh(dir, timeout, |_| 8080, |_| true);
}

/// The bench's files: cluster `c{i}` (if `has(i)`) with `timeout(i)`, its endpoint on
/// `port(i)`.
fn write_mesh(
    dir: &std::path::Path,
    timeout: impl Fn(usize) -> &'static str,
    port: impl Fn(usize) -> u16,
    has: impl Fn(usize) -> bool,
) {
    for file in 0..clusters() / 1000 {
        write_file(dir, file, &timeout, &port, &has);
    }
}

/// File `file` of the bench's files (clusters `c{1000 file}` to `c{1000 file + 999}`).
fn write_file(
    dir: &std::path::Path,
    file: usize,
    timeout: impl Fn(usize) -> &'static str,
    port: impl Fn(usize) -> u16,
    has: impl Fn(usize) -> bool,
) {
    let mut text = String::from("clusters:\n");
    for i in (file * 1000..(file + 1) * 1000).filter(|i| has(*i)) {
        text.push_str(&format!(
            "  - name: c{i}\n    connect_timeout: {}\n    type: EDS\n    eds_cluster_config: {{ eds_config: {{ ads: {{}} }} }}\n",
            timeout(i)
        ));
    }
    text.push_str("endpoints:\n");
    for i in (file * 1000..(file + 1) * 1000).filter(|i| has(*i)) {
        text.push_str(&format!(
            "  - cluster_name: c{i}\n    endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 10.0.{}.{}, port_value: {} }} }} }} }}] }}]\n",
            (i / 250) % 256,
            i % 250,
            port(i)
        ));
    }
    std::fs::write(dir.join(format!("f{file:02}.yaml")), text).expect("write");
}

/// Compute (and memoize) the names changed between two snapshots, every type.
fn warm(old: &switchyard::cache::Snapshot, new: &switchyard::cache::Snapshot) {
    for kind in ResourceType::ALL {
        new.get(kind).changes_since(old.get(kind));
    }
}

fn request(
    kind: ResourceType,
    names: &[String],
    version: &str,
    nonce: &str,
    node: bool,
) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: version.into(),
        node: node.then(|| Node {
            id: "bench".into(),
            ..Default::default()
        }),
        resource_names: names.to_vec(),
        type_url: kind.type_url().into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

fn main() {
    let clusters = clusters();
    let sotw_streams = size("FLEET_STREAMS", 1_000);
    let delta_streams = size("FLEET_DELTA_STREAMS", 200);
    // Streams per side in the ordering comparison.
    let plan_streams = delta_streams;
    let dir = tempfile::tempdir().expect("tmp");
    write_files(dir.path(), |_| "1s");
    let paths = vec![dir.path().to_path_buf()];
    let options = LoadOptions::default();

    // 1. Load.
    let load = median(
        (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                let c = config::load(&paths, &options).expect("loads");
                assert_eq!(c.resource_count(), 2 * clusters);
                t.elapsed()
            })
            .collect(),
    );
    println!("load {clusters} clusters + {clusters} endpoints: {load:?}");

    // 1b. Of that, Envoy's field rules (config::rules::check on each decoded resource; the
    // load runs them on both cores, this runs them on one).
    let loaded = config::load(&paths, &options).expect("loads");
    let messages: Vec<_> = loaded
        .files
        .iter()
        .flat_map(|f| f.resources.iter())
        .map(|r| {
            prost_reflect::DynamicMessage::decode(
                config::descriptors::message(r.kind),
                r.body.clone(),
            )
            .expect("decodes")
        })
        .collect();
    let rules = median(
        (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                for m in &messages {
                    config::rules::check(m).expect("valid");
                }
                t.elapsed()
            })
            .collect(),
    );
    println!(
        "  of which Envoy's field rules, {} resources on one core: {rules:?}",
        messages.len()
    );

    // 2. Snapshot build and lookup.
    let cache = Cache::new();
    let build = median(
        (0..RUNS)
            .map(|_| {
                cache.publish(config::load(&paths, &options).expect("loads"));
                let g = cache.current();
                let t = Instant::now();
                let s = g.snapshot_for(&switchyard::config::selector::NodeFacts::new("bench", ""));
                let took = t.elapsed();
                assert_eq!(s.get(ResourceType::Cluster).resources.len(), clusters);
                took
            })
            .collect(),
    );
    let g = cache.current();
    let t = Instant::now();
    for _ in 0..1000 {
        g.snapshot_for(&switchyard::config::selector::NodeFacts::new("bench", ""));
    }
    println!(
        "build a node group's snapshot: {build:?}; memoized lookup: {:?}",
        t.elapsed() / 1000
    );

    // 2b. What the cache keeps of the generations before the newest (`RECENT`, so
    // that a proxy back from another replica is recognised): the live heap of a cache that
    // published one generation, then of one that published 1 + RECENT, each with one
    // cluster changed, and each generation's snapshot built (what a stream asks for).
    // Loaded as the daemon reloads (a `Loader`: only the changed file parsed again).
    {
        let fresh = Cache::new();
        let mut loader = config::Loader::default();
        let facts = switchyard::config::selector::NodeFacts::new("bench", "");
        let live_empty = live_kib();
        fresh.publish(loader.load(&paths, &options).expect("loads"));
        fresh.current().snapshot_for(&facts);
        let live_one = live_kib();
        let changed = ["2s", "3s", "4s", "5s"];
        for g in 0..(switchyard::cache::DEFAULT_KEPT - 1) {
            let timeout = changed[g % changed.len()];
            let timeout = |i: usize| if i == 0 { timeout } else { "1s" };
            write_file(dir.path(), 0, timeout, |_| 8080, |_| true);
            fresh.publish(loader.load(&paths, &options).expect("loads"));
            fresh.current().snapshot_for(&facts);
        }
        let live_kept = live_kib();
        write_file(dir.path(), 0, |_| "1s", |_| 8080, |_| true);
        let one = live_one.saturating_sub(live_empty);
        let more = live_kept.saturating_sub(live_one);
        println!(
            "kept generations ({} before the newest): one generation {} MiB live heap; with \
             those kept {} MiB more ({} MiB each)",
            (switchyard::cache::DEFAULT_KEPT - 1),
            one / 1024,
            more / 1024,
            more / 1024 / (switchyard::cache::DEFAULT_KEPT - 1)
        );
    }

    // 3. S streams, wildcard CDS each.
    let snapshot = g.snapshot_for(&switchyard::config::selector::NodeFacts::new("bench", ""));
    let control_plane: Arc<str> = "bench".into();
    let rss_before = rss_kib();
    let live_before = live_kib();
    let mut streams: Vec<SotwStream> = Vec::with_capacity(sotw_streams);
    let names: Vec<String> = (0..clusters).map(|i| format!("c{i}")).collect();
    let t = Instant::now();
    let mut bytes = 0usize;
    for _ in 0..sotw_streams {
        let mut s = SotwStream::new(Variant::Aggregated).with_name_limit(2 * clusters);
        s.handle_request(request(ResourceType::Cluster, &[], "", "", true))
            .expect("ok");
        s.handle_snapshot(Arc::clone(&snapshot));
        let r = s.poll_response(Instant::now()).expect("cds");
        bytes += WireResponse::new(r.clone(), &control_plane, Secrets::default()).encoded_len();
        s.handle_request(request(
            ResourceType::Cluster,
            &[],
            &r.version,
            &r.nonce,
            false,
        ))
        .expect("ack");
        s.handle_request(request(ResourceType::Endpoint, &names, "", "", false))
            .expect("eds");
        let e = s.poll_response(Instant::now()).expect("eds");
        s.handle_request(request(
            ResourceType::Endpoint,
            &names,
            &e.version,
            &e.nonce,
            false,
        ))
        .expect("ack");
        streams.push(s);
    }
    let per_stream = t.elapsed() / sotw_streams as u32;
    let rss_after = rss_kib();
    println!(
        "{sotw_streams} streams, each sent CDS + EDS of {clusters}: {per_stream:?} per stream ({} MiB of CDS responses on the wire in all); RSS {} MiB -> {} MiB; {} KiB live heap per stream of state",
        bytes / (1024 * 1024),
        rss_before / 1024,
        rss_after / 1024,
        live_kib().saturating_sub(live_before) / sotw_streams
    );

    // 4. One cluster changes.
    write_files(dir.path(), |i| if i == 0 { "2s" } else { "1s" });
    cache.publish(config::load(&paths, &options).expect("loads"));
    let changed = cache
        .current()
        .snapshot_for(&switchyard::config::selector::NodeFacts::new("bench", ""));
    let t = Instant::now();
    for s in &mut streams {
        s.handle_snapshot(Arc::clone(&changed));
        let cds = s.poll_response(Instant::now()).expect("cds");
        assert_eq!(cds.resources.len(), clusters, "SotW CDS is the full set");
        let eds = s
            .poll_response(Instant::now())
            .expect("eds re-sent for warming (P28)");
        assert_eq!(eds.kind, ResourceType::Endpoint);
        // What the server then does with each: encode to the wire, from the shared bytes.
        for response in [cds, eds] {
            let wire = WireResponse::new(response, &control_plane, Secrets::default());
            let mut buf = Vec::with_capacity(wire.encoded_len());
            wire.encode(&mut buf).expect("buffer sized by encoded_len");
            assert!(!buf.is_empty());
        }
    }
    println!(
        "one cluster changed: {:?} per stream to decide, build and encode CDS + EDS",
        t.elapsed() / sotw_streams as u32
    );
    drop(streams);

    // 5. Delta streams, then one cluster changes (back to 1s everywhere), loaded as the
    // server loads: by a `Loader`, which parses only the file that changed and keeps the
    // other files' resources (the same `Arc`s).
    let mut loader = config::Loader::default();
    cache.publish(loader.load(&paths, &options).expect("loads"));
    let changed = cache
        .current()
        .snapshot_for(&switchyard::config::selector::NodeFacts::new("bench", ""));
    let delta_request =
        |kind: ResourceType, subscribe: &[String], nonce: &str, node: bool| DeltaDiscoveryRequest {
            node: node.then(|| Node {
                id: "bench".into(),
                ..Default::default()
            }),
            type_url: kind.type_url().into(),
            resource_names_subscribe: subscribe.to_vec(),
            response_nonce: nonce.into(),
            ..Default::default()
        };
    let live_before = live_kib();
    let mut deltas: Vec<DeltaStream> = Vec::with_capacity(delta_streams);
    let t = Instant::now();
    for _ in 0..delta_streams {
        let mut s = DeltaStream::new(Variant::Aggregated).with_name_limit(2 * clusters);
        s.handle_request(delta_request(ResourceType::Cluster, &[], "", true))
            .expect("ok");
        s.handle_request(delta_request(ResourceType::Endpoint, &names, "", false))
            .expect("ok");
        s.handle_snapshot(Arc::clone(&changed));
        // Per type, what came (split over responses past the response limit).
        let mut got = [0; 2];
        while let Some(r) = s.poll_response(Instant::now()) {
            got[usize::from(r.kind == ResourceType::Endpoint)] += r.resources.len();
            s.handle_request(delta_request(r.kind, &[], &r.nonce, false))
                .expect("ack");
        }
        assert_eq!(got, [clusters, clusters]);
        deltas.push(s);
    }
    let per_stream = t.elapsed() / delta_streams as u32;
    let live_after = live_kib();
    write_file(dir.path(), 0, |_| "1s", |_| 8080, |_| true);
    cache.publish(loader.load(&paths, &options).expect("loads"));
    let back = cache
        .current()
        .snapshot_for(&switchyard::config::selector::NodeFacts::new("bench", ""));
    // The names changed are computed once per node group, by whichever stream comes first:
    // timed apart, so that the per-stream figure is what each stream adds.
    let t = Instant::now();
    warm(&changed, &back);
    let diff_once = t.elapsed();
    let t = Instant::now();
    for s in &mut deltas {
        s.handle_snapshot(Arc::clone(&back));
        let mut sent = 0;
        while let Some(r) = s.poll_response(Instant::now()) {
            assert_eq!(r.resources.len(), 1, "delta sends what changed");
            sent += 1;
            let nonce = r.nonce.clone();
            let kind = r.kind;
            let wire = WireDeltaResponse::new(r, &control_plane, Secrets::default());
            let mut buf = Vec::with_capacity(wire.encoded_len());
            wire.encode(&mut buf).expect("buffer sized by encoded_len");
            s.handle_request(delta_request(kind, &[], &nonce, false))
                .expect("ack");
        }
        assert_eq!(sent, 2, "CDS, then EDS for warming (P28)");
    }
    println!(
        "{delta_streams} delta streams, each sent CDS + EDS of {clusters}: {per_stream:?} per stream; {} KiB live heap per stream of state; one cluster changed: the names changed computed once per node group in {diff_once:?}, then {:?} per stream to decide, build and encode CDS (1) + EDS (1)",
        live_after.saturating_sub(live_before) / delta_streams,
        t.elapsed() / delta_streams as u32
    );
    drop(deltas);

    // 6. Make-before-break: what ordering costs. The same streams with ordering on (the
    // default) and off, on the same changes.
    let streams_on = |ordering: Ordering| -> Vec<DeltaStream> {
        (0..plan_streams)
            .map(|_| {
                let mut s = DeltaStream::with_ordering(Variant::Aggregated, ordering)
                    .with_name_limit(2 * clusters);
                s.handle_request(delta_request(ResourceType::Cluster, &[], "", true))
                    .expect("ok");
                s.handle_request(delta_request(ResourceType::Endpoint, &names, "", false))
                    .expect("ok");
                s.handle_snapshot(Arc::clone(&back));
                while let Some(r) = s.poll_response(Instant::now()) {
                    s.handle_request(delta_request(r.kind, &[], &r.nonce, false))
                        .expect("ack");
                }
                s
            })
            .collect()
    };
    // Each stream takes `next` and answers until quiet: responses per stream, time per stream.
    let apply = |streams: &mut Vec<DeltaStream>, next: &Arc<switchyard::cache::Snapshot>| {
        let t = Instant::now();
        let mut responses = 0;
        for s in streams.iter_mut() {
            s.handle_snapshot(Arc::clone(next));
            while let Some(r) = s.poll_response(Instant::now()) {
                responses += 1;
                s.handle_request(delta_request(r.kind, &[], &r.nonce, false))
                    .expect("ack");
            }
            assert!(s.plan_status().is_none(), "every plan completes");
        }
        (
            responses / streams.len(),
            t.elapsed() / streams.len() as u32,
        )
    };
    let mut on = streams_on(Ordering::default());
    let mut off = streams_on(Ordering::off());
    // 6a. Endpoints only: one ClusterLoadAssignment changes.
    write_mesh(
        dir.path(),
        |_| "1s",
        |i| if i == 0 { 9090 } else { 8080 },
        |_| true,
    );
    cache.publish(config::load(&paths, &options).expect("loads"));
    let endpoints_only = cache
        .current()
        .snapshot_for(&switchyard::config::selector::NodeFacts::new("bench", ""));
    // The names changed are computed once per node group, by whichever stream comes first:
    // compute them up front so neither side pays for it.
    warm(&back, &endpoints_only);
    let (n_off, t_off) = apply(&mut off, &endpoints_only);
    let (n_on, t_on) = apply(&mut on, &endpoints_only);
    assert_eq!((n_on, n_off), (1, 1), "one EDS response either way");
    println!(
        "endpoints-only change, {plan_streams} delta streams: ordering on {t_on:?} per stream, off {t_off:?} per stream; {n_on} response each"
    );
    // 6b. A cut-over that crosses types: a route from c0 to c1, c0 removed.
    let route = |to: &str| {
        format!(
            "routes: [{{ name: main, virtual_hosts: [{{ name: all, domains: [\"*\"], routes: [{{ match: {{ prefix: / }}, route: {{ cluster: {to} }} }}] }}] }}]\n"
        )
    };
    for s in on.iter_mut().chain(off.iter_mut()) {
        s.handle_request(delta_request(
            ResourceType::Route,
            &["main".to_string()],
            "",
            false,
        ))
        .expect("ok");
    }
    std::fs::write(dir.path().join("routes.yaml"), route("c0")).expect("write");
    cache.publish(config::load(&paths, &options).expect("loads"));
    let with_route = cache
        .current()
        .snapshot_for(&switchyard::config::selector::NodeFacts::new("bench", ""));
    apply(&mut off, &with_route);
    apply(&mut on, &with_route);
    std::fs::write(dir.path().join("routes.yaml"), route("c1")).expect("write");
    write_mesh(
        dir.path(),
        |_| "1s",
        |i| if i == 0 { 9090 } else { 8080 },
        |i| i != 0,
    );
    cache.publish(config::load(&paths, &options).expect("loads"));
    let cut_over = cache
        .current()
        .snapshot_for(&switchyard::config::selector::NodeFacts::new("bench", ""));
    warm(&with_route, &cut_over);
    let t = Instant::now();
    let steps = switchyard::protocol::plan::steps(&with_route, &cut_over);
    let plan_once = t.elapsed();
    drop(steps);
    let (n_off, t_off) = apply(&mut off, &cut_over);
    let (n_on, t_on) = apply(&mut on, &cut_over);
    println!(
        "route cut-over with a cluster removed, {clusters} clusters: the plan computed once per node group in {plan_once:?}; {plan_streams} delta streams: ordering on {t_on:?} and {n_on} responses per stream, off {t_off:?} and {n_off} responses per stream"
    );

    // 7. LEDS (P34): one glob collection of N hosts (LbEndpoint resources); D delta streams
    // subscribe to the glob and take every member; then one host changes.
    let leds_dir = tempfile::tempdir().expect("tmp");
    let collection = "xdstp://bench/envoy.config.endpoint.v3.LbEndpoint/leds/z1";
    let write_leds = |changed_port: u16| {
        let mut text = String::from("lb_endpoints:\n");
        for i in 0..clusters {
            let port = if i == 417 { changed_port } else { 8080 };
            text.push_str(&format!(
                "  - {{ name: \"{collection}/h{i}\", endpoint: {{ address: {{ socket_address: {{ address: 10.1.{}.{}, port_value: {port} }} }} }} }}\n",
                (i / 250) % 256,
                i % 250
            ));
        }
        std::fs::write(leds_dir.path().join("leds.yaml"), text).expect("write");
    };
    write_leds(8080);
    let leds_paths = vec![leds_dir.path().to_path_buf()];
    let leds_cache = Cache::new();
    let t = Instant::now();
    leds_cache.publish(config::load(&leds_paths, &options).expect("loads"));
    let leds_load = t.elapsed();
    let facts = switchyard::config::selector::NodeFacts::new("bench", "");
    let before = leds_cache.current().snapshot_for(&facts);
    let glob = vec![format!("{collection}/*")];
    let mut leds_streams: Vec<DeltaStream> = (0..delta_streams)
        .map(|_| {
            let mut s = DeltaStream::new(Variant::Aggregated);
            s.handle_request(delta_request(ResourceType::LbEndpoint, &glob, "", true))
                .expect("ok");
            s.handle_snapshot(Arc::clone(&before));
            // Every member (split over responses past the response limit).
            let mut members = 0;
            while let Some(r) = s.poll_response(Instant::now()) {
                members += r.resources.len();
                s.handle_request(delta_request(r.kind, &[], &r.nonce, false))
                    .expect("ack");
            }
            assert_eq!(members, clusters, "every member");
            s
        })
        .collect();
    write_leds(9090);
    leds_cache.publish(config::load(&leds_paths, &options).expect("loads"));
    let after = leds_cache.current().snapshot_for(&facts);
    warm(&before, &after);
    let t = Instant::now();
    for s in &mut leds_streams {
        s.handle_snapshot(Arc::clone(&after));
        let r = s.poll_response(Instant::now()).expect("the changed host");
        assert_eq!(r.resources.len(), 1, "one changed host sends one resource");
        assert!(r.removed.is_empty());
        let wire = WireDeltaResponse::new(r, &control_plane, Secrets::default());
        let mut buf = Vec::with_capacity(wire.encoded_len());
        wire.encode(&mut buf).expect("buffer sized by encoded_len");
        assert!(s.poll_response(Instant::now()).is_none(), "nothing more");
    }
    println!(
        "LEDS, one glob collection of {clusters} hosts: loaded in {leds_load:?}; {delta_streams} delta streams subscribed to it; one host changed: {:?} per stream to decide, build and encode the one LbEndpoint",
        t.elapsed() / delta_streams as u32
    );
}
