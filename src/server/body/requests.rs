//! Requests of a stream method, read one message at a time (see `super`): each in a buffer
//! of exactly its size, freed once decoded; a repeated node (P1) and repeated names (P7)
//! left undecoded.
//!
//! Must not: know xDS beyond the field numbers it is told to skip when they repeat.

use std::marker::PhantomData;
use std::pin::Pin;

use bytes::{Buf, Bytes, BytesMut};
use http_body::Body;
use tonic::Status;

use super::PREFIX;

/// The requests of one stream method, decoded from its request body.
pub struct Requests<T> {
    body: tonic::body::Body,
    /// What has arrived of the next message (and perhaps the ones after it): the body's
    /// chunks as they came, joined only once a message is whole (one copy, into a buffer of
    /// its size; none when it came in one chunk). Growing one buffer as chunks came copied
    /// a 60 KB request (an Envoy's ACK, with its node) two or three times over.
    chunks: std::collections::VecDeque<Bytes>,
    /// Their bytes.
    buffered: usize,
    max_message: usize,
    /// The body ended.
    ended: bool,
    /// The node field's number, when its repeats are left undecoded (see
    /// [`Requests::repeated_node`]), and the first request's node as it came: its length
    /// and a digest (not the bytes: 60 KB per stream).
    node: Option<(u32, Option<Seen>)>,
    /// Names left undecoded when they repeat (see [`Requests::repeated_names`]).
    names: Option<Box<Names>>,
    message: PhantomData<fn() -> T>,
}

/// A field's bytes as they came, remembered as their length and a digest.
type Seen = (usize, u64);

/// What [`Requests::repeated_names`] keeps: the field numbers, and per type URL (as it
/// came) the names the stream took in last.
struct Names {
    names: u32,
    type_url: u32,
    /// The type URLs requests are expected to name: one of them is kept as its index.
    known: &'static [&'static str],
    taken: Vec<Taken>,
    /// The last message's type URL (an index into `taken`; `None` when it could not be
    /// told) and names; `repeat`: they were left undecoded.
    last: Option<(Option<usize>, Option<Seen>)>,
    repeat: bool,
}

/// Why reading a stream's requests failed: the status the stream ends with, and whose
/// doing it was.
#[derive(Debug)]
pub enum Unread {
    /// A request that is not one (framed wrong, too long, not protobuf): the client is
    /// told why.
    Bad(Status),
    /// The transport under the stream failed (the client went away, or its connection
    /// broke): there is no one to tell.
    Gone(Status),
}

impl Unread {
    /// The status the stream ends with.
    pub fn into_status(self) -> Status {
        match self {
            Unread::Bad(status) | Unread::Gone(status) => status,
        }
    }
}

/// The names taken in last by way of one type URL.
struct Taken {
    type_url: TypeUrl,
    /// The stream's key for the type the URL named (two URLs may name one type: a per-type
    /// stream takes an empty one as its own).
    key: Option<usize>,
    /// Names, while they are the latest the stream took in for that type.
    seen: Option<Seen>,
}

/// A type URL as a request named it: one of the known ones (see
/// [`Requests::repeated_names`]), by its index, or any other, as its bytes. A copy of each
/// was 64 bytes for each type of every stream.
enum TypeUrl {
    Known(usize),
    Other(Box<[u8]>),
}

impl TypeUrl {
    fn of(url: &[u8], known: &[&str]) -> TypeUrl {
        match known.iter().position(|k| k.as_bytes() == url) {
            Some(index) => TypeUrl::Known(index),
            None => TypeUrl::Other(url.into()),
        }
    }

    fn is(&self, url: &[u8], known: &[&str]) -> bool {
        match self {
            TypeUrl::Known(index) => known.get(*index).is_some_and(|k| k.as_bytes() == url),
            TypeUrl::Other(bytes) => **bytes == *url,
        }
    }
}

/// The most types whose names one stream's requests are compared for; the protocol ends a
/// stream that asks for many more (P33's limit).
const MAX_NAMED_TYPES: usize = 64;

impl<T: prost::Message + Default> Requests<T> {
    /// Messages longer than `max_message` bytes end the stream with `OUT_OF_RANGE`.
    pub fn new(body: tonic::body::Body, max_message: usize) -> Requests<T> {
        Requests {
            body,
            chunks: Default::default(),
            buffered: 0,
            max_message,
            ended: false,
            node: None,
            names: None,
            message: PhantomData,
        }
    }

    /// Leave undecoded a node (field `tag`) that repeats the first request's byte for byte:
    /// the request then comes without one, which P1 allows and reads as the first node. A
    /// real Envoy sends its node, some 60 KB with the extensions it lists, on every request
    /// of a stream (`set_node_on_first_message_only` is off by default); decoding it was
    /// most of the cost of an ACK. A node that differs in any byte is decoded, for the
    /// protocol to compare.
    pub fn repeated_node(mut self, tag: u32) -> Requests<T> {
        self.node = Some((tag, None));
        self
    }

    /// Leave undecoded the names (the repeated string field `names`) of a request that
    /// repeat byte for byte those of the last request of its type (the string field
    /// `type_url`) whose names the stream took in ([`Requests::took_names`]). A SotW
    /// request lists every name it subscribes to, every ACK too (P7): an Envoy ACKing its
    /// endpoints lists all its clusters again. [`Requests::names_repeated`] tells which
    /// requests came without them. `known`: the type URLs requests are expected to name.
    pub fn repeated_names(
        mut self,
        names: u32,
        type_url: u32,
        known: &'static [&'static str],
    ) -> Requests<T> {
        self.names = Some(Box::new(Names {
            names,
            type_url,
            known,
            taken: Vec::new(),
            last: None,
            repeat: false,
        }));
        self
    }

    /// Whether the message [`Requests::message`] returned last came without its names,
    /// because they repeat those taken in last for its type (see
    /// [`Requests::repeated_names`]).
    pub fn names_repeated(&self) -> bool {
        self.names.as_ref().is_some_and(|n| n.repeat)
    }

    /// The stream took in the names of the message returned last (or, when they were left
    /// undecoded, kept those it had), for the type it knows by `key`: the next request by
    /// the same type URL that repeats them may come without them. Not called, what the
    /// stream has of that type stays as it was.
    pub fn took_names(&mut self, key: usize) {
        let Some(names) = &mut self.names else {
            return;
        };
        let last = names.last.take();
        let index = last.and_then(|(index, _)| index);
        for (i, taken) in names.taken.iter_mut().enumerate() {
            if taken.key == Some(key) && Some(i) != index {
                // The type's names came by another URL (or one not told): these are old.
                taken.seen = None;
            }
        }
        if let (Some(index), Some((_, seen))) = (index, last) {
            let taken = &mut names.taken[index];
            taken.key = Some(key);
            taken.seen = seen;
        }
    }

    /// The next request; `None` once the client has closed its side (or cancelled).
    pub async fn message(&mut self) -> Result<Option<T>, Unread> {
        loop {
            if let Some(message) = self.take().map_err(Unread::Bad)? {
                return Ok(Some(message));
            }
            if self.ended {
                return match self.buffered == 0 {
                    true => Ok(None),
                    false => Err(Unread::Bad(Status::internal(
                        "Unexpected EOF decoding stream.",
                    ))),
                };
            }
            match std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await {
                None => self.ended = true,
                Some(Ok(frame)) => {
                    // Trailers end nothing on a request; the end of the body does.
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            self.buffered += data.len();
                            self.chunks.push_back(data);
                        }
                    }
                }
                Some(Err(status)) if status.code() == tonic::Code::Cancelled => {
                    self.ended = true;
                    self.chunks.clear();
                    self.buffered = 0;
                }
                Some(Err(status)) => return Err(Unread::Gone(status)),
            }
        }
    }

    /// A whole message off the front of the buffer, if one is there.
    fn take(&mut self) -> Result<Option<T>, Status> {
        if self.buffered < PREFIX {
            return Ok(None);
        }
        let mut prefix = [0u8; PREFIX];
        let mut filled = 0;
        for chunk in &self.chunks {
            let n = chunk.len().min(PREFIX - filled);
            prefix[filled..filled + n].copy_from_slice(&chunk[..n]);
            filled += n;
            if filled == PREFIX {
                break;
            }
        }
        let [flag, a, b, c, d] = prefix;
        match flag {
            0 => {}
            1 => {
                return Err(Status::internal(
                    "protocol error: received message with compressed-flag but no \
                     grpc-encoding was specified",
                ))
            }
            f => {
                return Err(Status::internal(format!(
                    "protocol error: received message with invalid compression flag: {f} \
                     (valid flags are 0 and 1)"
                )))
            }
        }
        let len = u32::from_be_bytes([a, b, c, d]) as usize;
        if len > self.max_message {
            return Err(Status::out_of_range(format!(
                "Error, decoded message length too large: found {len} bytes, the limit is: \
                 {} bytes",
                self.max_message
            )));
        }
        if self.buffered < PREFIX + len {
            // What is held grows with what arrives, not with what the prefix announces: a
            // client that announces 16 MiB and sends slowly holds only what it sent.
            return Ok(None);
        }
        let framed = self.split_off(PREFIX + len).slice(PREFIX..);
        self.decode(framed)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }

    /// `message` decoded, around its node when that repeats the first request's (see
    /// [`Requests::repeated_node`]) and around its names when they repeat (see
    /// [`Requests::repeated_names`]).
    fn decode(&mut self, message: Bytes) -> Result<T, prost::DecodeError> {
        if let Some(names) = &mut self.names {
            // Until told otherwise: names decoded, of a type URL not told.
            names.last = Some((None, None));
            names.repeat = false;
        }
        if self.node.is_none() && self.names.is_none() {
            return T::decode(message);
        }
        let tags = Tags {
            node: self.node.as_ref().map(|(tag, _)| *tag),
            names: self.names.as_ref().map(|n| n.names),
            type_url: self.names.as_ref().map(|n| n.type_url),
        };
        let Some(layout) = Layout::of(&message, tags) else {
            return T::decode(message);
        };
        let mut skip: [Option<std::ops::Range<usize>>; 2] = [None, None];
        if let (Some((_, first)), Some(span)) = (&mut self.node, layout.node) {
            let node = (span.len(), digest(&message[span.clone()]));
            match first {
                Some(first) if *first == node => skip[0] = Some(span),
                // The first node (kept), or one that differs: decoded, for the protocol.
                _ => {
                    first.get_or_insert(node);
                }
            }
        }
        if let Some(names) = &mut self.names {
            // An absent type URL is an empty one.
            let type_url = layout.type_url.map_or(&[][..], |at| &message[at]);
            let known = names.known;
            let index = match names
                .taken
                .iter()
                .position(|t| t.type_url.is(type_url, known))
            {
                Some(index) => Some(index),
                None if names.taken.len() < MAX_NAMED_TYPES => {
                    // Room for this one alone: a stream asks for a few types, once each.
                    names.taken.reserve_exact(1);
                    names.taken.push(Taken {
                        type_url: TypeUrl::of(type_url, known),
                        key: None,
                        seen: None,
                    });
                    Some(names.taken.len() - 1)
                }
                None => None,
            };
            if let Some(index) = index {
                let seen = layout
                    .names
                    .as_ref()
                    .map(|span| (span.len(), digest(&message[span.clone()])));
                if seen.is_some() && names.taken[index].seen == seen {
                    names.repeat = true;
                    skip[1] = layout.names;
                }
                names.last = Some((Some(index), seen));
            }
        }
        match skip {
            [None, None] => T::decode(message),
            [Some(a), None] | [None, Some(a)] => {
                T::decode(message[..a.start].chain(&message[a.end..]))
            }
            [Some(a), Some(b)] => {
                let (a, b) = if a.start < b.start { (a, b) } else { (b, a) };
                T::decode(
                    message[..a.start]
                        .chain(&message[a.end..b.start])
                        .chain(&message[b.end..]),
                )
            }
        }
    }

    /// The first `n` bytes buffered (at most `buffered`), as one buffer.
    fn split_off(&mut self, n: usize) -> Bytes {
        let out = self.split_off_chunks(n);
        // Nothing left to read: the queue's buffer goes too (128 bytes of every idle
        // stream; a request's chunks come and go in one read, most often one chunk).
        if self.chunks.is_empty() {
            self.chunks = Default::default();
        }
        out
    }

    fn split_off_chunks(&mut self, n: usize) -> Bytes {
        self.buffered -= n;
        if let Some(front) = self.chunks.front_mut() {
            if front.len() >= n {
                let out = front.split_to(n);
                if front.is_empty() {
                    self.chunks.pop_front();
                }
                return out;
            }
        }
        let mut joined = BytesMut::with_capacity(n);
        while let Some(front) = self.chunks.front_mut() {
            let want = n - joined.len();
            if want == 0 {
                break;
            }
            if front.len() <= want {
                joined.extend_from_slice(front);
                self.chunks.pop_front();
            } else {
                joined.extend_from_slice(&front.split_to(want));
            }
        }
        joined.freeze()
    }
}

/// A digest of a node's bytes, keyed per process: a client cannot aim a collision, and
/// one would only let a changed node pass for the first, by which the stream goes anyway
/// (P1). foldhash reads long input at about half an instruction a byte (callgrind).
fn digest(bytes: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    static KEY: std::sync::OnceLock<foldhash::quality::RandomState> = std::sync::OnceLock::new();
    KEY.get_or_init(Default::default).hash_one(bytes)
}

/// The fields [`Layout::of`] looks for.
#[derive(Clone, Copy)]
struct Tags {
    node: Option<u32>,
    names: Option<u32>,
    type_url: Option<u32>,
}

/// Where fields lie in a message, key and all.
#[derive(Debug, Default, PartialEq)]
struct Layout {
    /// The node field's one occurrence.
    node: Option<std::ops::Range<usize>>,
    /// The names, when there are some and they lie together (as every encoder writes a
    /// repeated field): every occurrence of the field, back to back.
    names: Option<std::ops::Range<usize>>,
    /// The type URL's value (without its key).
    type_url: Option<std::ops::Range<usize>>,
}

impl Layout {
    /// Where `tags` lie in `message` (all length-delimited); `None` when the message does
    /// not parse (the decoder says why), or has one of them where protobuf would merge or
    /// pick between occurrences (a node twice, names apart, a type URL twice): those are
    /// left to the decoder.
    fn of(message: &[u8], tags: Tags) -> Option<Layout> {
        use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
        let mut rest = message;
        let mut layout = Layout::default();
        let mut names_apart = false;
        while !rest.is_empty() {
            let start = message.len() - rest.len();
            let (field, wire_type) = decode_key(&mut rest).ok()?;
            let tag = Some(field);
            if tag != tags.node && tag != tags.names && tag != tags.type_url {
                skip_field(wire_type, field, &mut rest, DecodeContext::default()).ok()?;
                continue;
            }
            if wire_type != WireType::LengthDelimited {
                return None;
            }
            let len = usize::try_from(decode_varint(&mut rest).ok()?).ok()?;
            if len > rest.len() {
                return None;
            }
            let value = message.len() - rest.len();
            rest.advance(len);
            let end = message.len() - rest.len();
            if tag == tags.names {
                match &mut layout.names {
                    Some(names) if names.end == start => names.end = end,
                    Some(_) => names_apart = true,
                    None => layout.names = Some(start..end),
                }
            } else if tag == tags.node {
                if layout.node.replace(start..end).is_some() {
                    return None;
                }
            } else if layout.type_url.replace(value..end).is_some() {
                return None;
            }
        }
        if names_apart {
            layout.names = None;
        }
        Some(layout)
    }
}

#[cfg(test)]
mod tests {
    use std::task::{Context, Poll};

    use super::super::frame;
    use super::super::tests::message;
    use super::*;
    use envoy_types::pb::google::protobuf::Any;
    use http_body::Frame;
    use prost::Message;
    use tonic::codegen::http;

    /// A request body of these frames (or errors), in order.
    struct Chunks(std::collections::VecDeque<Result<Frame<Bytes>, Status>>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Status;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
            Poll::Ready(self.0.pop_front())
        }
    }

    fn requests(chunks: Vec<Result<Frame<Bytes>, Status>>, max: usize) -> Requests<Any> {
        Requests::new(tonic::body::Body::new(Chunks(chunks.into())), max)
    }

    fn data(bytes: &[u8]) -> Result<Frame<Bytes>, Status> {
        Ok(Frame::data(Bytes::copy_from_slice(bytes)))
    }

    #[tokio::test]
    async fn requests_are_read_across_chunks_and_several_to_a_chunk() {
        let a = frame(&message("first"), 1024).expect("framed");
        let b = frame(&message("second"), 1024).expect("framed");
        let c = frame(&message(""), 1024).expect("framed");
        let both = [&a[..], &b[..3]].concat();
        let chunks = vec![
            data(&both[..2]),
            data(&both[2..]),
            data(&[&b[3..], &c[..]].concat()),
            Ok(Frame::trailers(http::HeaderMap::new())),
        ];
        let mut r = requests(chunks, 1024);
        assert_eq!(r.message().await.expect("ok"), Some(message("first")));
        assert_eq!(r.message().await.expect("ok"), Some(message("second")));
        assert_eq!(r.message().await.expect("ok"), Some(message("")));
        assert_eq!(r.chunks.capacity(), 0, "no buffer kept once all is read");
        assert_eq!(r.message().await.expect("ok"), None, "the end of the body");
        assert!(r.chunks.is_empty(), "nothing kept between messages");
        assert_eq!(r.buffered, 0);
    }

    /// P1: a node repeated byte for byte comes out as no node (which the protocol reads as
    /// the first one); a node that differs, or one that comes back after being left out, is
    /// decoded, for the protocol to compare; so is every field around it.
    #[tokio::test]
    async fn p1_a_repeated_node_is_left_undecoded_and_a_changed_one_is_not() {
        use envoy_types::pb::envoy::config::core::v3::Node;
        use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
        let node = |id: &str| Node {
            id: id.into(),
            cluster: "c".into(),
            client_features: vec!["f".repeat(100)],
            ..Default::default()
        };
        let request = |node: Option<Node>, nonce: &str| DiscoveryRequest {
            version_info: "v1".into(),
            node,
            resource_names: vec!["a".into(), "b".into()],
            type_url: "t".into(),
            response_nonce: nonce.into(),
            ..Default::default()
        };
        let sent = [
            request(Some(node("n1")), "1"),
            request(Some(node("n1")), "2"),
            request(None, "3"),
            request(Some(node("n2")), "4"),
            request(Some(node("n1")), "5"),
        ];
        // Each in three chunks, as a large request comes in several DATA frames.
        let chunks: Vec<_> = sent
            .iter()
            .flat_map(|r| {
                let framed = frame(r, 4096).expect("framed");
                let third = framed.len() / 3;
                [
                    data(&framed[..third]),
                    data(&framed[third..2 * third]),
                    data(&framed[2 * third..]),
                ]
            })
            .collect();
        let mut r: Requests<DiscoveryRequest> =
            Requests::new(tonic::body::Body::new(Chunks(chunks.into())), 4096).repeated_node(2);
        let mut got = Vec::new();
        while let Some(m) = r.message().await.expect("decodes") {
            got.push(m);
        }
        let expected = [
            sent[0].clone(),
            request(None, "2"),
            request(None, "3"),
            sent[3].clone(),
            request(None, "5"),
        ];
        assert_eq!(got, expected);
        // Without the option every node is decoded.
        let mut plain: Requests<DiscoveryRequest> = Requests::new(
            tonic::body::Body::new(Chunks(
                vec![data(&frame(&sent[1], 4096).expect("framed"))].into(),
            )),
            4096,
        );
        assert_eq!(
            plain.message().await.expect("decodes"),
            Some(sent[1].clone())
        );
    }

    #[test]
    fn fields_are_found_where_protobuf_would_not_merge_them() {
        use envoy_types::pb::envoy::config::core::v3::Node;
        use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
        let tags = Tags {
            node: Some(2),
            names: Some(3),
            type_url: Some(4),
        };
        let with = DiscoveryRequest {
            version_info: "v".into(),
            node: Some(Node {
                id: "n".into(),
                ..Default::default()
            }),
            resource_names: vec!["a".into(), "bc".into()],
            type_url: "t".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let layout = Layout::of(&with, tags).expect("parses");
        let node = layout.node.clone().expect("there");
        assert_eq!(&with[node.clone()], &[0x12, 3, 0x0a, 1, b'n'][..]);
        let names = layout.names.clone().expect("there");
        assert_eq!(&with[names], &[0x1a, 1, b'a', 0x1a, 2, b'b', b'c'][..]);
        assert_eq!(
            &with[layout.type_url.expect("there")],
            b"t",
            "the value alone"
        );
        let none = Tags {
            node: Some(9),
            names: Some(10),
            type_url: Some(11),
        };
        assert_eq!(Layout::of(&with, none), Some(Layout::default()), "absent");
        let twice = [&with[..], &with[node]].concat();
        assert_eq!(
            Layout::of(&twice, tags),
            None,
            "a node twice: left to the decoder"
        );
        // Names apart (another field between them) are not names to compare.
        let apart = [&with[..], &[0x1a, 1, b'd'][..]].concat();
        let layout = Layout::of(&apart, tags).expect("parses");
        assert_eq!(layout.names, None);
        assert!(layout.node.is_some());
        assert_eq!(Layout::of(&with[..with.len() - 1], tags), None, "cut short");
        assert_eq!(
            Layout::of(&[0x12, 0x7f, 1], tags),
            None,
            "longer than the message"
        );
        assert_eq!(
            Layout::of(&[0x18, 1], tags),
            None,
            "names not length-delimited"
        );
    }

    /// P7: a SotW request lists every name again. Names that repeat byte for byte those
    /// the stream took in last for the type URL come out as none, marked as repeated; any
    /// other list (or one the stream did not take in) is decoded, and so is every field
    /// around it.
    #[tokio::test]
    async fn p7_repeated_names_are_left_undecoded_once_taken_and_only_then() {
        use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
        let request = |type_url: &str, names: &[&str], nonce: &str| DiscoveryRequest {
            version_info: "v1".into(),
            resource_names: names.iter().map(|n| n.to_string()).collect(),
            type_url: type_url.into(),
            response_nonce: nonce.into(),
            ..Default::default()
        };
        // (request, whether the stream takes in its names as the type of this key, and
        // whether it should come without them).
        let steps: Vec<(DiscoveryRequest, Option<usize>, bool)> = vec![
            (request("eds", &["a", "b"], ""), Some(1), false),
            (request("eds", &["a", "b"], "1"), None, true), // repeated; not taken (stale)
            (request("eds", &["a", "b"], "2"), Some(1), true), // still the ones taken
            (request("cds", &[], "1"), Some(0), false),     // no names: nothing to compare
            (request("cds", &[], "2"), Some(0), false),
            (request("eds", &["a", "b"], "3"), Some(1), true), // per type URL
            (request("eds", &["a"], "4"), None, false),        // others; not taken
            (request("eds", &["a", "b"], "5"), Some(1), true), // what was taken stays
            (request("eds", &["a"], "6"), Some(1), false),
            (request("eds", &["a", "b"], "7"), Some(1), false), // taken were ["a"]
            // Another URL for the same type (a per-type stream takes an empty one as its
            // own): what it took in makes the first URL's names old.
            (request("", &["c"], "8"), Some(1), false),
            (request("eds", &["a", "b"], "9"), Some(1), false),
            (request("eds", &["a", "b"], "10"), Some(1), true),
        ];
        let chunks: Vec<_> = steps
            .iter()
            .map(|(r, _, _)| data(&frame(r, 4096).expect("framed")))
            .collect();
        let mut r: Requests<DiscoveryRequest> =
            Requests::new(tonic::body::Body::new(Chunks(chunks.into())), 4096)
                .repeated_node(2)
                // "eds" and the empty URL kept as an index, "cds" as its bytes.
                .repeated_names(3, 4, &["eds", ""]);
        for (i, (sent, taken, repeated)) in steps.into_iter().enumerate() {
            let got = r.message().await.expect("decodes").expect("a request");
            assert_eq!(r.names_repeated(), repeated, "step {i}: {sent:?}");
            let expected = match repeated {
                true => DiscoveryRequest {
                    resource_names: Vec::new(),
                    ..sent
                },
                false => sent,
            };
            assert_eq!(got, expected, "step {i}");
            if let Some(key) = taken {
                r.took_names(key);
            }
        }
        assert_eq!(r.message().await.expect("ends"), None);
    }

    /// The code of a request the client is told is bad (not a transport that failed).
    fn bad(unread: Result<Option<Any>, Unread>) -> tonic::Code {
        match unread {
            Err(Unread::Bad(status)) => status.code(),
            other => panic!("not a bad request: {other:?}"),
        }
    }

    #[tokio::test]
    async fn bad_request_streams_end_with_the_status_tonic_gives() {
        let a = frame(&message("0123456789"), 1024).expect("framed");
        let over = requests(vec![data(&a)], 8).message().await;
        assert_eq!(bad(over), tonic::Code::OutOfRange, "too long");
        let mut compressed = a.to_vec();
        compressed[0] = 1;
        let refused = requests(vec![data(&compressed)], 1024).message().await;
        assert_eq!(bad(refused), tonic::Code::Internal, "compressed");
        let cut = requests(vec![data(&a[..7])], 1024).message().await;
        assert_eq!(bad(cut), tonic::Code::Internal, "ends within");
        let junk = requests(vec![data(&[0, 0, 0, 0, 2, 0xff, 0xff])], 1024)
            .message()
            .await;
        assert_eq!(bad(junk), tonic::Code::Internal, "not protobuf");
        // A transport that broke under the stream: the client went away, not a bad request.
        let reset = requests(vec![data(&a[..7]), Err(Status::unavailable("reset"))], 1024)
            .message()
            .await;
        match reset {
            Err(Unread::Gone(status)) => assert_eq!(status.code(), tonic::Code::Unavailable),
            other => panic!("not gone: {other:?}"),
        }
        // A client that goes away (cancelled) has ended its stream.
        let gone = requests(vec![data(&a[..7]), Err(Status::cancelled("gone"))], 1024)
            .message()
            .await;
        assert_eq!(gone.expect("the end"), None);
    }
}
