//! A stream method's bodies: requests read, and responses written, one message at a time,
//! each in a buffer of exactly its size which is freed once the message is decoded or sent.
//!
//! Not tonic's `Streaming` and `EncodeBody`: each keeps one buffer per stream with the
//! capacity of the largest message (or batch of messages) it ever carried, for as long as
//! the stream lives. An idle xDS stream lives for hours; its largest response is its first
//! full config, its largest request often its first (a delta proxy back from a restart lists
//! every resource it holds; a delta EDS subscription at 100,000 clusters is 0.8 MiB of
//! names). On a fleet those buffers were the largest part of an idle proxy's memory (see
//! docs/benchmarks.md, "Memory per idle proxy"). The rest is what tonic does for a server
//! stream without compression:
//! - requests: a compressed message is refused (`INTERNAL`), one over the size limit ends
//!   the stream with `OUT_OF_RANGE`, a cancelled request stream is the client going away;
//! - responses: the messages as DATA (one chunk each; tonic joins messages ready together),
//!   then trailers with the status (`grpc-status: 0` at the end of the stream); a message
//!   over the size limit ends the stream with `OUT_OF_RANGE` (see [`frame`]).

use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio_stream::Stream;
use tonic::codegen::http;
use tonic::Status;

/// gRPC's message prefix: a compressed flag and a 32-bit length.
pub const PREFIX: usize = 5;

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
    node: Option<(u32, Option<(usize, u64)>)>,
    message: PhantomData<fn() -> T>,
}

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

    /// The next request; `None` once the client has closed its side (or cancelled).
    pub async fn message(&mut self) -> Result<Option<T>, Status> {
        loop {
            if let Some(message) = self.take()? {
                return Ok(Some(message));
            }
            if self.ended {
                return match self.buffered == 0 {
                    true => Ok(None),
                    false => Err(Status::internal("Unexpected EOF decoding stream.")),
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
                Some(Err(status)) => return Err(status),
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
    /// [`Requests::repeated_node`]).
    fn decode(&mut self, message: Bytes) -> Result<T, prost::DecodeError> {
        let Some((tag, first)) = &mut self.node else {
            return T::decode(message);
        };
        let Some(span) = field_span(&message, *tag) else {
            return T::decode(message);
        };
        let node = (span.len(), digest(&message[span.clone()]));
        match first {
            Some(first) if *first == node => {
                T::decode(message[..span.start].chain(&message[span.end..]))
            }
            // The first node (kept), or one that differs: decoded, for the protocol.
            _ => {
                first.get_or_insert(node);
                T::decode(message)
            }
        }
    }

    /// The first `n` bytes buffered (at most `buffered`), as one buffer.
    fn split_off(&mut self, n: usize) -> Bytes {
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

/// Where the one occurrence of field `tag` (length-delimited) lies in `message`, key and
/// all; `None` when it is absent, repeated (protobuf merges the occurrences: left to the
/// decoder), or the message does not parse (the decoder says why).
fn field_span(message: &[u8], tag: u32) -> Option<std::ops::Range<usize>> {
    use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
    let mut rest = message;
    let mut found = None;
    while !rest.is_empty() {
        let start = message.len() - rest.len();
        let (field, wire_type) = decode_key(&mut rest).ok()?;
        if field == tag {
            if found.is_some() || wire_type != WireType::LengthDelimited {
                return None;
            }
            let len = usize::try_from(decode_varint(&mut rest).ok()?).ok()?;
            if len > rest.len() {
                return None;
            }
            rest.advance(len);
            found = Some(start..message.len() - rest.len());
        } else {
            skip_field(wire_type, field, &mut rest, DecodeContext::default()).ok()?;
        }
    }
    found
}

/// What a stream task hands its response body: a framed message (see [`frame`]), or the
/// status that ends the stream. Boxed, so that each slot of the channel between them is the
/// size of a `Bytes`.
#[derive(Debug)]
pub enum Outgoing {
    Message(Bytes),
    End(Box<Status>),
}

// The slot size the channel's blocks are made of (32 slots each).
const _: () = assert!(std::mem::size_of::<Outgoing>() == std::mem::size_of::<Bytes>());

impl Outgoing {
    pub fn end(status: Status) -> Outgoing {
        Outgoing::End(Box::new(status))
    }
}

/// The response body of one stream method: the messages of `S`, then the status that ends it.
pub struct ResponseBody<S> {
    messages: S,
    /// The trailers went out: nothing follows.
    done: bool,
}

impl<S> ResponseBody<S> {
    pub fn new(messages: S) -> ResponseBody<S> {
        ResponseBody {
            messages,
            done: false,
        }
    }

    fn trailers(&mut self, status: &Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.done = true;
        let mut trailers = http::HeaderMap::with_capacity(3);
        Poll::Ready(Some(
            status
                .add_header(&mut trailers)
                .map(|()| Frame::trailers(trailers)),
        ))
    }
}

/// `message` with its gRPC prefix, in a buffer of exactly that size.
pub fn frame(message: &impl prost::Message, max_message: usize) -> Result<Bytes, Status> {
    let len = message.encoded_len();
    if len > max_message {
        return Err(Status::out_of_range(format!(
            "Error, encoded message length too large: found {len} bytes, the limit is: \
             {max_message} bytes"
        )));
    }
    let prefix_len = u32::try_from(len).map_err(|_| {
        Status::resource_exhausted(format!(
            "Cannot return body with more than 4GB of data but got {len} bytes"
        ))
    })?;
    let mut buf = BytesMut::with_capacity(PREFIX + len);
    buf.put_u8(0);
    buf.put_u32(prefix_len);
    message.encode_raw(&mut buf);
    debug_assert_eq!(
        buf.len(),
        PREFIX + len,
        "encoded_len and encode_raw disagree"
    );
    Ok(buf.freeze())
}

impl<S> Body for ResponseBody<S>
where
    S: Stream<Item = Outgoing> + Unpin,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match ready!(Pin::new(&mut self.messages).poll_next(cx)) {
            Some(Outgoing::Message(framed)) => Poll::Ready(Some(Ok(Frame::data(framed)))),
            Some(Outgoing::End(status)) => self.trailers(&status),
            None => self.trailers(&Status::ok("")),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::Any;
    use prost::Message;

    fn message(text: &str) -> Any {
        Any {
            type_url: text.to_string(),
            value: Vec::new(),
        }
    }

    type Messages = tokio_stream::Iter<std::vec::IntoIter<Outgoing>>;

    fn framed(m: Any) -> Outgoing {
        Outgoing::Message(frame(&m, 1024).expect("small"))
    }

    async fn frames(messages: Vec<Outgoing>) -> Vec<Frame<Bytes>> {
        let mut body: ResponseBody<Messages> = ResponseBody::new(tokio_stream::iter(messages));
        let mut out = Vec::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            out.push(frame.expect("a frame"));
        }
        assert!(body.is_end_stream());
        out
    }

    #[tokio::test]
    async fn each_message_is_one_exactly_sized_data_frame_then_ok_trailers() {
        let frames = frames(vec![framed(message("first")), framed(message(""))]).await;
        assert_eq!(frames.len(), 3);
        let first = frames[0].data_ref().expect("data");
        let encoded = message("first").encode_to_vec();
        let prefix = [0, 0, 0, 0, u8::try_from(encoded.len()).expect("small")];
        assert_eq!(&first[..], &[&prefix[..], &encoded].concat()[..]);
        assert_eq!(frames[1].data_ref().expect("data")[..], [0, 0, 0, 0, 0]);
        let trailers = frames[2].trailers_ref().expect("trailers");
        assert_eq!(trailers["grpc-status"], "0");
    }

    #[tokio::test]
    async fn an_error_ends_the_stream_with_its_status() {
        let messages = vec![
            framed(message("a")),
            Outgoing::end(Status::unavailable("going away")),
            framed(message("never")),
        ];
        let frames = frames(messages).await;
        assert_eq!(frames.len(), 2);
        let trailers = frames[1].trailers_ref().expect("trailers");
        assert_eq!(trailers["grpc-status"], "14");
        assert_eq!(trailers["grpc-message"], "going%20away");
    }

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
    fn a_field_is_found_once_or_not_at_all() {
        use envoy_types::pb::envoy::config::core::v3::Node;
        use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
        let with = DiscoveryRequest {
            version_info: "v".into(),
            node: Some(Node {
                id: "n".into(),
                ..Default::default()
            }),
            type_url: "t".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let span = field_span(&with, 2).expect("there");
        assert_eq!(&with[span.clone()], &[0x12, 3, 0x0a, 1, b'n'][..]);
        assert_eq!(field_span(&with, 9), None, "absent");
        let twice = [&with[..], &with[span]].concat();
        assert_eq!(field_span(&twice, 2), None, "repeated: left to the decoder");
        assert_eq!(field_span(&with[..with.len() - 1], 2), None, "cut short");
        assert_eq!(
            field_span(&[0x12, 0x7f, 1], 2),
            None,
            "longer than the message"
        );
    }

    #[tokio::test]
    async fn bad_request_streams_end_with_the_status_tonic_gives() {
        let a = frame(&message("0123456789"), 1024).expect("framed");
        let over = requests(vec![data(&a)], 8).message().await;
        assert_eq!(over.expect_err("too long").code(), tonic::Code::OutOfRange);
        let mut compressed = a.to_vec();
        compressed[0] = 1;
        let refused = requests(vec![data(&compressed)], 1024).message().await;
        assert_eq!(
            refused.expect_err("compressed").code(),
            tonic::Code::Internal
        );
        let cut = requests(vec![data(&a[..7])], 1024).message().await;
        assert_eq!(cut.expect_err("ends within").code(), tonic::Code::Internal);
        let junk = requests(vec![data(&[0, 0, 0, 0, 2, 0xff, 0xff])], 1024)
            .message()
            .await;
        assert_eq!(
            junk.expect_err("not protobuf").code(),
            tonic::Code::Internal
        );
        let reset = requests(vec![data(&a[..7]), Err(Status::unavailable("reset"))], 1024)
            .message()
            .await;
        assert_eq!(reset.expect_err("broken").code(), tonic::Code::Unavailable);
        // A client that goes away (cancelled) has ended its stream.
        let gone = requests(vec![data(&a[..7]), Err(Status::cancelled("gone"))], 1024)
            .message()
            .await;
        assert_eq!(gone.expect("the end"), None);
    }

    #[test]
    fn a_message_over_the_limit_is_refused_out_of_range() {
        let refused = frame(&message("0123456789"), 8).expect_err("over the limit");
        assert_eq!(refused.code(), tonic::Code::OutOfRange);
        assert!(refused.message().contains("found 12 bytes"), "{refused:?}");
        assert_eq!(
            frame(&message("0123456789"), 12)
                .expect("at the limit")
                .len(),
            17
        );
    }
}
