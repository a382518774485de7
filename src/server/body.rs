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
//! - responses: the messages as DATA (one chunk each, or two when part of one is shared
//!   with other streams, see `wire::Listing::frame_shared`; tonic joins messages ready
//!   together),
//!   then trailers with the status (`grpc-status: 0` at the end of the stream); a message
//!   over the size limit ends the stream with `OUT_OF_RANGE` (see [`frame`]).
//!
//! Requests are read in `requests` ([`Requests`]); responses are framed and written here.
//!
//! Must not: know xDS: it frames and unframes gRPC messages, whatever they hold.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio_stream::Stream;
use tonic::codegen::http;
use tonic::Status;

mod requests;

pub use requests::{Requests, Unread};

/// gRPC's message prefix: a compressed flag and a 32-bit length.
pub const PREFIX: usize = 5;

/// What a stream task hands its response body: a framed message (see [`frame`]), or the
/// status that ends the stream. The channel between them (`server::stream`) allocates a
/// node per message, freed as the body takes it, and keeps nothing per slot for the
/// stream's life (docs/benchmarks.md, "The stream's channel and its task's future").
#[derive(Debug)]
pub struct Outgoing(Part);

#[derive(Debug)]
enum Part {
    Message(Bytes),
    End(Status),
}

impl Outgoing {
    pub fn message(framed: Bytes) -> Outgoing {
        Outgoing(Part::Message(framed))
    }

    pub fn end(status: Status) -> Outgoing {
        Outgoing(Part::End(status))
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
    let prefix_len = prefix_len(len, max_message)?;
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

/// The gRPC prefix's length for a message of `len` bytes; over `max_message`, the status
/// that ends the stream (`OUT_OF_RANGE`, as tonic's).
pub fn prefix_len(len: usize, max_message: usize) -> Result<u32, Status> {
    if len > max_message {
        return Err(Status::out_of_range(format!(
            "Error, encoded message length too large: found {len} bytes, the limit is: \
             {max_message} bytes"
        )));
    }
    u32::try_from(len).map_err(|_| {
        Status::resource_exhausted(format!(
            "Cannot return body with more than 4GB of data but got {len} bytes"
        ))
    })
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
        match ready!(Pin::new(&mut self.messages).poll_next(cx)).map(|o| o.0) {
            Some(Part::Message(framed)) => Poll::Ready(Some(Ok(Frame::data(framed)))),
            Some(Part::End(status)) => self.trailers(&status),
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

    /// A message to frame: an `Any` whose type URL is `text` (its size follows the text).
    pub(super) fn message(text: &str) -> Any {
        Any {
            type_url: text.to_string(),
            value: Vec::new(),
        }
    }

    type Messages = tokio_stream::Iter<std::vec::IntoIter<Outgoing>>;

    fn framed(m: Any) -> Outgoing {
        Outgoing::message(frame(&m, 1024).expect("small"))
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
