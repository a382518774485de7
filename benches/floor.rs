//! The transport's floor: what the same HTTP/2 stack costs to serve the same bytes with no
//! xDS logic at all. `cargo bench --bench floor -- CONFIG_DIR ADDR`.
//!
//! Not an xDS server: a yardstick for the server's CPU per push (docs/benchmarks.md, "The
//! transport's floor"). It loads `CONFIG_DIR` with Switchyard's loader (the same resources, the same bytes), encodes one
//! response per type once, and serves ADS (SotW and Incremental) on `ADDR` over the same
//! stack and settings as `switchyard serve` (hyper's HTTP/2 through hyper-util, TCP_NODELAY,
//! one task per stream): every stream that asks for a type gets that type's one response,
//! whole, from the same shared bytes, with the same nonce; requests are read for their type
//! URL and nonce only; ACKs are not checked, names are not looked at, nothing is tracked but
//! which version of each type a stream was sent. On SIGHUP it loads `CONFIG_DIR` again and
//! sends each stream the types whose content changed, and the endpoints again whenever the
//! clusters changed (as Switchyard does, P28: Envoy keeps a changed cluster warming until
//! its endpoints come again).
//!
//! So what it spends per push is what reading the ACKs and writing the same bytes costs
//! (HTTP/2 framing, the tasks' wakeups, the kernel's loopback), and nothing of Switchyard's
//! own. Run `switchyard loadgen --server-pid <its pid> --trigger "kill -HUP <its pid>"`
//! against it, as against `switchyard serve`; docs/benchmarks.md ("The transport's floor")
//! has the method and the figures. With `--h2` it serves the same on the h2 crate alone
//! (hyper's HTTP/2 underneath, without hyper), each stream writing into h2 from its task;
//! with `--h2-one-task`, on h2 alone with each connection's streams driven on the
//! connection's own task. Bounded: it serves until killed, and a run is bounded by the load
//! generator's `--max-time`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryResponse, DiscoveryResponse, Resource as DeltaResource,
};
use envoy_types::pb::google::protobuf::Any;
use http_body::{Body, Frame};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prost::Message;
use switchyard::config::{self, LoadOptions};
use switchyard::resource::ResourceType;
use tokio::sync::{mpsc, watch};

/// The allocator `switchyard serve` runs on (src/bin/switchyard.rs).
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// What a request is read for: its type URL and nonce. The node, names and the rest are
/// skipped unread (prost skips unknown fields by their length).
#[derive(Clone, PartialEq, prost::Message)]
struct SotwRequest {
    #[prost(string, tag = "4")]
    type_url: String,
    #[prost(string, tag = "5")]
    response_nonce: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct DeltaRequest {
    #[prost(string, tag = "2")]
    type_url: String,
    #[prost(string, tag = "6")]
    response_nonce: String,
}

/// One generation: per type, its version and its one response, framed for gRPC, SotW and
/// delta.
#[derive(Default)]
struct Generation {
    types: HashMap<&'static str, Encoded>,
}

struct Encoded {
    version: String,
    sotw: Bytes,
    delta: Bytes,
}

fn framed(message: &impl Message) -> Bytes {
    let len = message.encoded_len();
    let mut out = BytesMut::with_capacity(5 + len);
    out.extend_from_slice(&[0]);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    message.encode(&mut out).expect("a buffer of its size");
    out.freeze()
}

fn load(dir: &str) -> Result<Generation, String> {
    let loaded =
        config::load(&[dir.into()], &LoadOptions::default()).map_err(|e| format!("{dir}: {e}"))?;
    let mut generation = Generation::default();
    for kind in ResourceType::ALL {
        let mut resources: Vec<_> = loaded
            .files
            .iter()
            .flat_map(|f| f.resources.iter())
            .filter(|r| r.kind == kind)
            .collect();
        if resources.is_empty() {
            continue;
        }
        resources.sort_by(|a, b| a.name.cmp(&b.name));
        let version = {
            use std::hash::{BuildHasher, BuildHasherDefault};
            let hasher = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
            let versions: Vec<&str> = resources.iter().map(|r| r.version.as_str()).collect();
            format!("{:016x}", hasher.hash_one(versions))
        };
        let anys: Vec<Any> = resources
            .iter()
            .map(|r| Any::decode(r.any.clone()).expect("Switchyard encoded it"))
            .collect();
        let sotw = framed(&DiscoveryResponse {
            version_info: version.clone(),
            resources: anys.clone(),
            type_url: kind.type_url().to_string(),
            nonce: version.clone(),
            ..Default::default()
        });
        let delta = framed(&DeltaDiscoveryResponse {
            system_version_info: version.clone(),
            resources: resources
                .iter()
                .zip(anys)
                .map(|(r, any)| DeltaResource {
                    name: r.name.clone(),
                    version: r.version.clone(),
                    resource: Some(any),
                    ..Default::default()
                })
                .collect(),
            type_url: kind.type_url().to_string(),
            nonce: version.clone(),
            ..Default::default()
        });
        generation.types.insert(
            kind.type_url(),
            Encoded {
                version,
                sotw,
                delta,
            },
        );
    }
    Ok(generation)
}

/// The length of the gRPC message at the start of `buf`, if all of it is there.
fn whole(buf: &[u8]) -> Option<usize> {
    let len = u32::from_be_bytes(buf.get(1..5)?.try_into().ok()?) as usize;
    (buf.len() >= 5 + len).then_some(len)
}

/// A response body fed by the stream's task, chunk by chunk.
struct Chunks(mpsc::Receiver<Bytes>);

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|c| c.map(|c| Ok(Frame::data(c))))
    }
}

/// A request stream's DATA, chunk by chunk (`None` at its end or on an error).
trait Requests {
    fn next(&mut self) -> impl std::future::Future<Output = Option<Bytes>> + Send;
}

impl Requests for Incoming {
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            let frame = std::future::poll_fn(|cx| Pin::new(&mut *self).poll_frame(cx)).await?;
            if let Ok(data) = frame.ok()?.into_data() {
                return Some(data);
            }
        }
    }
}

impl Requests for h2::RecvStream {
    async fn next(&mut self) -> Option<Bytes> {
        let data = self.data().await?.ok()?;
        // What was read is given back to the peer's window at once, as hyper does.
        let _ = self.flow_control().release_capacity(data.len());
        Some(data)
    }
}

/// Where a stream's responses go; `false` once the client is gone.
trait Responses {
    fn send(&mut self, bytes: Bytes) -> impl std::future::Future<Output = bool> + Send;
}

/// Through hyper: to the response body's channel ([`Chunks`]).
impl Responses for mpsc::Sender<Bytes> {
    async fn send(&mut self, bytes: Bytes) -> bool {
        mpsc::Sender::send(self, bytes).await.is_ok()
    }
}

/// Straight into h2's send queue, from the stream's own task.
impl Responses for h2::SendStream<Bytes> {
    async fn send(&mut self, bytes: Bytes) -> bool {
        self.send_data(bytes, false).is_ok()
    }
}

/// One stream: read requests, answer each type once per version, and again when it changes.
async fn stream(
    mut body: impl Requests,
    delta: bool,
    mut current: watch::Receiver<Arc<Generation>>,
    mut out: impl Responses,
) {
    let mut buffer = BytesMut::new();
    // Type URL -> the version this stream was sent.
    let mut sent: HashMap<String, String> = HashMap::new();
    loop {
        tokio::select! {
            data = body.next() => {
                let Some(mut data) = data else { return };
                // Whole messages are read where they came; only a message split across
                // frames is copied together.
                loop {
                    let message = if buffer.is_empty() {
                        match whole(&data) {
                            Some(len) => {
                                data.advance(5);
                                data.split_to(len)
                            }
                            None => {
                                buffer.extend_from_slice(&data);
                                break;
                            }
                        }
                    } else {
                        buffer.extend_from_slice(&std::mem::take(&mut data));
                        match whole(&buffer) {
                            Some(len) => {
                                buffer.advance(5);
                                buffer.split_to(len).freeze()
                            }
                            None => break,
                        }
                    };
                    let type_url = if delta {
                        DeltaRequest::decode(message).map(|r| r.type_url)
                    } else {
                        SotwRequest::decode(message).map(|r| r.type_url)
                    };
                    let Ok(type_url) = type_url else { return };
                    sent.entry(type_url).or_default();
                    if data.is_empty() && buffer.is_empty() {
                        break;
                    }
                }
            }
            changed = current.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        let generation = Arc::clone(&current.borrow_and_update());
        let clusters = ResourceType::Cluster.type_url();
        let clusters_changed = sent
            .get(clusters)
            .zip(generation.types.get(clusters))
            .is_some_and(|(sent, now)| !sent.is_empty() && *sent != now.version);
        for (type_url, version) in sent.iter_mut() {
            let Some(encoded) = generation.types.get(type_url.as_str()) else {
                continue;
            };
            let again = clusters_changed && type_url == ResourceType::Endpoint.type_url();
            if *version != encoded.version || again {
                version.clone_from(&encoded.version);
                let bytes = if delta { &encoded.delta } else { &encoded.sotw };
                if !out.send(bytes.clone()).await {
                    return;
                }
            }
        }
    }
}

/// h2's server side of `tcp`, with the settings `switchyard serve` gives hyper that h2 has
/// (100 streams at most; keepalive PINGs are hyper's and are left out).
async fn handshake(
    tcp: tokio::net::TcpStream,
) -> Option<h2::server::Connection<tokio::net::TcpStream, Bytes>> {
    h2::server::Builder::new()
        .max_concurrent_streams(100)
        .handshake::<_, Bytes>(tcp)
        .await
        .ok()
}

/// A stream h2 accepted, its response headers sent: the stream's work ([`stream`]), writing
/// its responses into h2's queue itself; `None` when the client is already gone.
fn answer(
    request: hyper::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    current: &watch::Receiver<Arc<Generation>>,
) -> Option<impl std::future::Future<Output = ()> + Send> {
    let delta = request.uri().path().contains("Delta");
    let response = hyper::Response::builder()
        .header("content-type", "application/grpc")
        .body(())
        .expect("a valid response");
    let out = respond.send_response(response, false).ok()?;
    Some(stream(request.into_body(), delta, current.clone(), out))
}

/// One connection on h2 alone, each stream on a task of its own.
async fn serve_h2(tcp: tokio::net::TcpStream, current: watch::Receiver<Arc<Generation>>) {
    let Some(mut connection) = handshake(tcp).await else {
        return;
    };
    while let Some(Ok((request, respond))) = connection.accept().await {
        if let Some(stream) = answer(request, respond, &current) {
            tokio::spawn(stream);
        }
    }
}

/// One connection on h2 alone with every stream driven on the connection's own task: the
/// streams' futures are polled beside h2's connection, in one task, so a push wakes one
/// task per connection, not one per stream and one for the connection.
async fn serve_h2_one_task(tcp: tokio::net::TcpStream, current: watch::Receiver<Arc<Generation>>) {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let Some(mut connection) = handshake(tcp).await else {
        return;
    };
    let mut streams = FuturesUnordered::new();
    loop {
        tokio::select! {
            accepted = connection.accept() => {
                let Some(Ok((request, respond))) = accepted else { return };
                if let Some(stream) = answer(request, respond, &current) {
                    streams.push(stream);
                }
            }
            Some(()) = streams.next(), if !streams.is_empty() => {}
        }
    }
}

/// How the floor serves its connections.
#[derive(Clone, Copy, PartialEq)]
enum Stack {
    /// hyper's HTTP/2, as `switchyard serve` (one task per connection and one per stream).
    Hyper,
    /// h2 alone, one task per connection and one per stream (`--h2`).
    H2,
    /// h2 alone, the streams driven on their connection's task (`--h2-one-task`).
    H2OneTask,
}

fn main() -> Result<(), String> {
    let mut args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    // `--h2`: the connections on the h2 crate alone, no hyper; `--h2-one-task`: the same,
    // each connection's streams on its own task.
    let stack = if args.iter().any(|a| a == "--h2-one-task") {
        Stack::H2OneTask
    } else if args.iter().any(|a| a == "--h2") {
        Stack::H2
    } else {
        Stack::Hyper
    };
    args.retain(|a| a != "--h2" && a != "--h2-one-task");
    let usage = "usage: cargo bench --bench floor -- [--h2 | --h2-one-task] CONFIG_DIR ADDR (a \
                 server to run a load generator against, until killed; docs/benchmarks.md)";
    let [dir, addr] = args.as_slice() else {
        if args.is_empty() {
            // A plain `cargo bench` runs every bench: this one needs its arguments.
            eprintln!("floor: not run: {usage}");
            return Ok(());
        }
        return Err(usage.into());
    };
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let (publish, current) = watch::channel(Arc::new(load(dir)?));
        let listener = tokio::net::TcpListener::bind(addr.as_str())
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        eprintln!("floor: serving {dir} on {addr}, pid {}", std::process::id());
        let dir = dir.clone();
        tokio::spawn(async move {
            let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                .expect("SIGHUP");
            while hup.recv().await.is_some() {
                match load(&dir) {
                    Ok(g) => {
                        let _ = publish.send(Arc::new(g));
                    }
                    Err(e) => eprintln!("floor: {e}"),
                }
            }
        });
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let current = current.clone();
            match stack {
                Stack::H2 => {
                    tokio::spawn(serve_h2(tcp, current));
                    continue;
                }
                Stack::H2OneTask => {
                    tokio::spawn(serve_h2_one_task(tcp, current));
                    continue;
                }
                Stack::Hyper => {}
            }
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                        let delta = request.uri().path().contains("Delta");
                        let (tx, rx) = mpsc::channel(4);
                        tokio::spawn(stream(request.into_body(), delta, current.clone(), tx));
                        async move {
                            let response = hyper::Response::builder()
                                .header("content-type", "application/grpc")
                                .body(Chunks(rx))
                                .expect("a valid response");
                            Ok::<_, Infallible>(response)
                        }
                    });
                let mut builder = auto::Builder::new(TokioExecutor::new());
                builder
                    .http2()
                    .timer(TokioTimer::new())
                    .keep_alive_interval(Some(switchyard::server::KEEPALIVE_INTERVAL))
                    .keep_alive_timeout(switchyard::server::KEEPALIVE_TIMEOUT)
                    .max_concurrent_streams(100);
                let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
            });
        }
    })
}
