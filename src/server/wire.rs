//! Writing responses: `DiscoveryResponse` and `DeltaDiscoveryResponse` on the wire, assembled
//! from each resource's `Any`, encoded once per snapshot (`Resource::any`), instead of
//! building and encoding Envoy's generated messages per client.
//!
//! The responses are prost-derived twins of the generated messages. Each resource in them is
//! an [`Item`]: a message written straight from the snapshot's bytes (a SotW `Any` as it is;
//! a delta `Resource` as its version, that `Any` and its name, through prost's field
//! encoders), with no copy, and without touching their reference counts (the `Arc<Resource>`
//! moves in from the protocol's response): what every stream shares stays out of the cache
//! lines both cores write. Only what differs per client is encoded here (its `Any` still the
//! snapshot's bytes): a SotW resource wrapped with its TTL (P26), and a delta resource with aliases
//! (P24), a TTL or as a heartbeat (P25). A response whose resources are a list shared by the
//! streams that send the same ([`Listing`]: a whole selection, a push's changes to the same
//! names) is written from one buffer encoded once and found by the list, with no item made
//! per stream. Tests check that the generated types decode the responses to the same
//! messages, byte for byte.
//!
//! Owns: the field layout. Must not: decide what goes in a response (`protocol`).

use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::config::core::v3::ControlPlane;
use envoy_types::pb::envoy::service::discovery::v3::{ResourceError, ResourceName};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use envoy_types::pb::google::rpc::Status as RpcStatus;
use prost::encoding::{self, DecodeContext, WireType};
use prost::{DecodeError, Message};

use tonic::Status;

use super::body;
use crate::protocol::{
    DeltaResource, DeltaResources, DeltaResponse, Resources, Response, UnknownResponse,
    NOT_FOUND_MESSAGE,
};
use crate::resource::{Resource, Secrets};

/// The type URL of the `Resource` wrapper in SotW (P26).
pub const RESOURCE_TYPE_URL: &str = "type.googleapis.com/envoy.service.discovery.v3.Resource";

/// `envoy.service.discovery.v3.DiscoveryResponse` (`canary` is never set).
#[derive(Clone, Message)]
pub struct WireResponse {
    #[prost(string, tag = "1")]
    pub version_info: String,
    /// Each a `google.protobuf.Any`.
    #[prost(message, repeated, tag = "2")]
    pub resources: Vec<Item>,
    #[prost(string, tag = "4")]
    pub type_url: String,
    #[prost(string, tag = "5")]
    pub nonce: String,
    #[prost(message, optional, tag = "6")]
    pub control_plane: Option<ControlPlane>,
    /// P32: `NOT_FOUND` for each subscribed name that does not exist.
    #[prost(message, repeated, tag = "7")]
    pub resource_errors: Vec<ResourceError>,
}

/// `envoy.service.discovery.v3.DeltaDiscoveryResponse`.
#[derive(Clone, Message)]
pub struct WireDeltaResponse {
    #[prost(string, tag = "1")]
    pub system_version_info: String,
    /// Each an `envoy.service.discovery.v3.Resource`.
    #[prost(message, repeated, tag = "2")]
    pub resources: Vec<Item>,
    #[prost(string, tag = "4")]
    pub type_url: String,
    #[prost(string, tag = "5")]
    pub nonce: String,
    #[prost(string, repeated, tag = "6")]
    pub removed_resources: Vec<String>,
    #[prost(message, optional, tag = "7")]
    pub control_plane: Option<ControlPlane>,
    /// P32: `NOT_FOUND` for each subscribed name that does not exist.
    #[prost(message, repeated, tag = "9")]
    pub resource_errors: Vec<ResourceError>,
}

/// One resource of a response: a message body already encoded, written as it is.
#[derive(Clone, Debug, Default)]
pub struct Item(Body);

#[derive(Clone, Debug, Default)]
enum Body {
    /// The snapshot's bytes, shared: the resource's `Any` as a proxy gets it (see
    /// [`Resource::any_for`]), alone (SotW) or in a delta `Resource` with its version and
    /// name.
    Any(Arc<Resource>, Secrets),
    Delta(Arc<Resource>, Secrets),
    /// Made for this client alone (its `Any` still the snapshot's bytes).
    Wrapped(Box<WrappedAny>),
    Own(Box<OwnResource>),
    /// What prost decodes into (the server never does).
    #[default]
    Empty,
}

/// `envoy.service.discovery.v3.Resource` fields a delta item writes.
const VERSION: u32 = 1;
const RESOURCE: u32 = 2;
const NAME: u32 = 3;

/// Encode-only: the server never decodes a response.
impl Message for Item {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        match &self.0 {
            Body::Any(r, secrets) => buf.put_slice(r.any_for(*secrets)),
            // In tag order, each left out when empty, as prost writes a message.
            Body::Delta(r, secrets) => {
                if !r.version.is_empty() {
                    encoding::string::encode(VERSION, &r.version, buf);
                }
                encoding::bytes::encode(RESOURCE, r.any_for(*secrets), buf);
                if !r.name.is_empty() {
                    encoding::string::encode(NAME, &r.name, buf);
                }
            }
            Body::Wrapped(w) => w.encode_raw(buf),
            Body::Own(r) => r.encode_raw(buf),
            Body::Empty => {}
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        match &self.0 {
            Body::Any(r, secrets) => r.any_for(*secrets).len(),
            Body::Delta(r, secrets) => {
                let string = |tag, value: &String| {
                    if value.is_empty() {
                        0
                    } else {
                        encoding::string::encoded_len(tag, value)
                    }
                };
                string(VERSION, &r.version)
                    + encoding::bytes::encoded_len(RESOURCE, r.any_for(*secrets))
                    + string(NAME, &r.name)
            }
            Body::Wrapped(w) => w.encoded_len(),
            Body::Own(r) => r.encoded_len(),
            Body::Empty => 0,
        }
    }

    fn clear(&mut self) {
        self.0 = Body::Empty;
    }
}

/// `google.rpc.Code.NOT_FOUND`.
const NOT_FOUND: i32 = 5;

/// P32: a `NOT_FOUND` resource error for each of `names`.
pub fn not_found(names: Vec<String>) -> Vec<ResourceError> {
    names
        .into_iter()
        .map(|name| ResourceError {
            resource_name: Some(ResourceName {
                name,
                dynamic_parameter_constraints: None,
            }),
            error_detail: Some(RpcStatus {
                code: NOT_FOUND,
                message: NOT_FOUND_MESSAGE.to_string(),
                details: Vec::new(),
            }),
        })
        .collect()
}

fn control_plane(identifier: &str) -> Option<ControlPlane> {
    (!identifier.is_empty()).then(|| ControlPlane {
        identifier: identifier.to_string(),
    })
}

/// `envoy.service.discovery.v3.Resource` for one client (with aliases, a TTL, or as a
/// heartbeat): its `Any` still the snapshot's bytes, not copied.
#[derive(Clone, Message)]
struct OwnResource {
    #[prost(string, tag = "1")]
    version: String,
    /// The encoded `Any`; `None` for a heartbeat (name and version only, P25).
    #[prost(bytes = "bytes", optional, tag = "2")]
    resource: Option<Bytes>,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(string, repeated, tag = "4")]
    aliases: Vec<String>,
    #[prost(message, optional, tag = "6")]
    ttl: Option<PbDuration>,
}

/// `google.protobuf.Any` holding an [`OwnResource`] (SotW with TTLs, P26).
#[derive(Clone, Message)]
struct WrappedAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(message, optional, tag = "2")]
    value: Option<OwnResource>,
}

impl OwnResource {
    /// `r` as a proxy gets it (see [`Resource::any_for`]), with these aliases and TTL;
    /// without its body (`body: false`) for a heartbeat.
    fn new(
        r: &Resource,
        aliases: Vec<String>,
        ttl: Option<Duration>,
        body: bool,
        secrets: Secrets,
    ) -> OwnResource {
        OwnResource {
            version: r.version.clone(),
            resource: body.then(|| r.any_for(secrets).clone()),
            name: r.name.clone(),
            aliases,
            ttl: ttl.map(|d| PbDuration {
                seconds: d.as_secs() as i64,
                nanos: d.subsec_nanos() as i32,
            }),
        }
    }
}

impl WireResponse {
    /// `response` on the wire; private key material goes out as `secrets` says.
    pub fn new(response: Response, control_plane_id: &str, secrets: Secrets) -> WireResponse {
        let wrap_ttl = response.wrap_ttl;
        let resources = response
            .resources
            .into_iter()
            .map(|r| match r.ttl.filter(|_| wrap_ttl) {
                // Wrapped with its TTL (P26).
                Some(ttl) => {
                    let wrapped = WrappedAny {
                        type_url: RESOURCE_TYPE_URL.to_string(),
                        value: Some(OwnResource::new(&r, Vec::new(), Some(ttl), true, secrets)),
                    };
                    Item(Body::Wrapped(Box::new(wrapped)))
                }
                None => Item(Body::Any(r, secrets)),
            })
            .collect();
        WireResponse {
            version_info: response.version,
            resources,
            type_url: response.kind.type_url().to_string(),
            nonce: response.nonce,
            control_plane: control_plane(control_plane_id),
            resource_errors: not_found(response.not_found),
        }
    }

    /// A response for a type the server does not serve (P33): nothing, each name asked for
    /// not found (P32).
    pub fn unknown(response: UnknownResponse, control_plane_id: &str) -> WireResponse {
        WireResponse {
            version_info: response.version,
            resources: Vec::new(),
            type_url: response.type_url,
            nonce: response.nonce,
            control_plane: control_plane(control_plane_id),
            resource_errors: not_found(response.not_found),
        }
    }
}

impl WireDeltaResponse {
    /// `response` on the wire; private key material goes out as `secrets` says.
    pub fn new(
        response: DeltaResponse,
        control_plane_id: &str,
        secrets: Secrets,
    ) -> WireDeltaResponse {
        let resources = response
            .resources
            .into_each()
            .into_iter()
            .map(|d: DeltaResource| {
                if d.aliases.is_empty() && d.ttl.is_none() && d.body {
                    Item(Body::Delta(d.resource, secrets))
                } else {
                    let own = OwnResource::new(&d.resource, d.aliases, d.ttl, d.body, secrets);
                    Item(Body::Own(Box::new(own)))
                }
            })
            .collect();
        WireDeltaResponse {
            system_version_info: response.system_version,
            resources,
            type_url: response.kind.type_url().to_string(),
            nonce: response.nonce,
            removed_resources: response.removed,
            control_plane: control_plane(control_plane_id),
            resource_errors: not_found(response.not_found),
        }
    }

    /// A response for a type the server does not serve (P33): each name asked for removed
    /// (P20) and not found (P32).
    pub fn unknown(response: UnknownResponse, control_plane_id: &str) -> WireDeltaResponse {
        WireDeltaResponse {
            system_version_info: response.version,
            resources: Vec::new(),
            type_url: response.type_url,
            nonce: response.nonce,
            removed_resources: response.not_found.clone(),
            control_plane: control_plane(control_plane_id),
            resource_errors: not_found(response.not_found),
        }
    }
}

/// A response as a stream writes it: the message, and, when its resources are a list
/// shared with other streams' responses (`protocol::Resources::Shared`,
/// `protocol::DeltaResources::Shared`), that list (each resource as the snapshot has it),
/// written from a tail encoded once and found by the list alone: no stream takes each
/// resource in hand.
pub struct Listing<M> {
    message: M,
    /// The shared list, which `message` then leaves out.
    shared: Option<(Arc<[Arc<Resource>]>, Secrets)>,
}

/// A SotW response as a stream writes it.
pub type SotwWire = Listing<WireResponse>;
/// A delta response as a stream writes it.
pub type DeltaWire = Listing<WireDeltaResponse>;

/// A message whose resources a shared list may stand for.
trait Listed: Shareable<Message = Self> + Message + Clone {
    /// `resource` as an item of this message.
    fn item(resource: &Arc<Resource>, secrets: Secrets) -> Item;
    fn items(&mut self) -> &mut Vec<Item>;
}

impl Listed for WireResponse {
    fn item(resource: &Arc<Resource>, secrets: Secrets) -> Item {
        Item(Body::Any(Arc::clone(resource), secrets))
    }
    fn items(&mut self) -> &mut Vec<Item> {
        &mut self.resources
    }
}

impl Listed for WireDeltaResponse {
    fn item(resource: &Arc<Resource>, secrets: Secrets) -> Item {
        Item(Body::Delta(Arc::clone(resource), secrets))
    }
    fn items(&mut self) -> &mut Vec<Item> {
        &mut self.resources
    }
}

impl SotwWire {
    /// `response` on the wire; private key material goes out as `secrets` says.
    pub fn new(mut response: Response, control_plane_id: &str, secrets: Secrets) -> SotwWire {
        let shared = match std::mem::take(&mut response.resources) {
            // Each wrapped with its TTL is this client's own (P26).
            Resources::Shared(list)
                if !response.wrap_ttl || list.iter().all(|r| r.ttl.is_none()) =>
            {
                Some((list, secrets))
            }
            each => {
                response.resources = each;
                None
            }
        };
        Listing {
            message: WireResponse::new(response, control_plane_id, secrets),
            shared,
        }
    }

    /// A response for a type the server does not serve (P33).
    pub fn unknown(response: UnknownResponse, control_plane_id: &str) -> SotwWire {
        Listing {
            message: WireResponse::unknown(response, control_plane_id),
            shared: None,
        }
    }
}

impl DeltaWire {
    /// `response` on the wire; private key material goes out as `secrets` says.
    pub fn new(mut response: DeltaResponse, control_plane_id: &str, secrets: Secrets) -> DeltaWire {
        let shared = match std::mem::take(&mut response.resources) {
            DeltaResources::Shared { list, .. } => Some((list, secrets)),
            each => {
                response.resources = each;
                None
            }
        };
        Listing {
            message: WireDeltaResponse::new(response, control_plane_id, secrets),
            shared,
        }
    }

    /// A response for a type the server does not serve (P33).
    pub fn unknown(response: UnknownResponse, control_plane_id: &str) -> DeltaWire {
        Listing {
            message: WireDeltaResponse::unknown(response, control_plane_id),
            shared: None,
        }
    }
}

#[allow(private_bounds)]
impl<M: Listed> Listing<M> {
    /// This response framed for the wire (as `server::body::frame` frames it), in two
    /// parts: its gRPC prefix with what is this stream's own (the version and the nonce),
    /// then the rest (resources, type, control plane, removals, errors). The rest is
    /// encoded once and shared by every stream that sends the same (the same resources as
    /// the snapshot has them, nothing wrapped for one client; a shared list is found by the
    /// list alone): a push sends 10,000 streams the same ClusterLoadAssignments, and each
    /// copied them into its own buffer. Protobuf takes a message's fields in any order.
    pub fn frame_shared(
        &self,
        max_message: usize,
        tails: &SharedTails,
    ) -> Result<(Bytes, Option<Bytes>), Status> {
        self.frame_parts(max_message, tails)
    }
}

impl<M: Listed> Shareable for Listing<M> {
    type Message = M;
    fn parts(&self) -> Parts<'_> {
        Parts {
            list: self.shared.as_ref(),
            ..self.message.parts()
        }
    }
    /// The message with the shared list's resources in it.
    fn whole(&self) -> std::borrow::Cow<'_, M> {
        match &self.shared {
            None => std::borrow::Cow::Borrowed(&self.message),
            Some((list, secrets)) => {
                let mut whole = self.message.clone();
                *whole.items() = list.iter().map(|r| M::item(r, *secrets)).collect();
                std::borrow::Cow::Owned(whole)
            }
        }
    }
    fn rest(&self) -> M {
        self.whole().rest()
    }
}

/// Responses with fewer resources are framed whole: too little to share.
const SHARE_AT_LEAST: usize = 2;

/// How many shared tails are kept: the responses of a push in flight at once (one per type
/// and kind of proxy, and the secrets setting).
const SHARED_TAILS: usize = 16;

/// How many bytes of shared tails are kept, at most; a tail over a sixteenth of it is not
/// kept (each stream frames such a response whole, as before).
const SHARED_TAIL_BYTES: usize = 64 << 20;

/// A tail encoded once ([`Listing::frame_shared`]), and what it was encoded from.
struct SharedTail {
    key: TailKey,
    bytes: Bytes,
}

/// What a tail was encoded from, apart from its resources' bytes: the resources by identity
/// (weak: a tail keeps no resource of an older snapshot alive, and while it is kept no other
/// resource takes their addresses), and the other fields it holds.
struct TailKey {
    delta: bool,
    type_url: String,
    control_plane: Option<ControlPlane>,
    resource_errors: Vec<ResourceError>,
    removed: Vec<String>,
    resources: Identities,
}

/// A tail's resources, by identity: each (the items of a response), or a shared list.
enum Identities {
    Each(Vec<(Weak<Resource>, Secrets)>),
    List(Weak<[Arc<Resource>]>, Secrets),
}

impl TailKey {
    /// Whether this key's resources are `items` (each the snapshot's resource as it is),
    /// or `list`.
    fn has(&self, items: &[Item], list: Option<&(Arc<[Arc<Resource>]>, Secrets)>) -> bool {
        match (&self.resources, list) {
            (Identities::List(w, s), Some((list, t))) => {
                items.is_empty() && std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(list)) && s == t
            }
            (Identities::Each(each), None) => {
                each.len() == items.len()
                    && each.iter().zip(items).all(|((w, s), item)| match &item.0 {
                        Body::Any(r, t) | Body::Delta(r, t) => {
                            std::ptr::eq(w.as_ptr(), Arc::as_ptr(r)) && s == t
                        }
                        _ => false,
                    })
            }
            _ => false,
        }
    }
}

/// The resources of `items`, by identity.
fn identities(items: &[Item]) -> Vec<(Weak<Resource>, Secrets)> {
    items
        .iter()
        .filter_map(|item| match &item.0 {
            Body::Any(r, s) | Body::Delta(r, s) => Some((Arc::downgrade(r), *s)),
            _ => None,
        })
        .collect()
}

/// A response's fields, borrowed, as [`Shareable`] splits them.
struct Parts<'a> {
    delta: bool,
    /// The stream's own fields: (tag, value) of the version, then the nonce.
    own: [(u32, &'a str); 2],
    items: &'a [Item],
    /// A shared list written after `items` (see [`DeltaWire`]).
    list: Option<&'a (Arc<[Arc<Resource>]>, Secrets)>,
    type_url: &'a str,
    control_plane: &'a Option<ControlPlane>,
    resource_errors: &'a [ResourceError],
    removed: &'a [String],
}

impl Parts<'_> {
    /// Whether every item is the snapshot's resource as it is (what a client alone gets
    /// is never shared).
    fn shareable(&self) -> bool {
        if let Some((list, _)) = self.list {
            return self.items.is_empty() && list.len() >= SHARE_AT_LEAST;
        }
        self.items.len() >= SHARE_AT_LEAST
            && self.items.iter().all(|item| match item.0 {
                Body::Any(..) => !self.delta,
                Body::Delta(..) => self.delta,
                _ => false,
            })
    }

    /// Whether `key` is what these parts' tail is encoded from.
    fn are(&self, key: &TailKey) -> bool {
        key.delta == self.delta
            && key.type_url == self.type_url
            && key.has(self.items, self.list)
            && key.removed == self.removed
            && key.control_plane == *self.control_plane
            && key.resource_errors == self.resource_errors
    }

    /// What these parts' tail is encoded from.
    fn key(&self) -> TailKey {
        TailKey {
            delta: self.delta,
            type_url: self.type_url.to_string(),
            control_plane: self.control_plane.clone(),
            resource_errors: self.resource_errors.to_vec(),
            removed: self.removed.to_vec(),
            resources: match self.list {
                Some((list, secrets)) => Identities::List(Arc::downgrade(list), *secrets),
                None => Identities::Each(identities(self.items)),
            },
        }
    }
}

/// A message whose fields but two (its version and nonce, the stream's own) may be
/// encoded once and shared: the resources as the snapshot has them, and what every stream
/// of a push sends alike.
trait Shareable: Sized {
    /// The message as it goes out.
    type Message: Message + Clone;
    fn parts(&self) -> Parts<'_>;
    /// The message whole.
    fn whole(&self) -> std::borrow::Cow<'_, Self::Message>;
    /// This message without its own fields.
    fn rest(&self) -> Self::Message;

    /// See [`Listing::frame_shared`].
    fn frame_parts(
        &self,
        max_message: usize,
        tails: &SharedTails,
    ) -> Result<(Bytes, Option<Bytes>), Status> {
        let parts = self.parts();
        let tail = match parts.shareable() {
            true => tails.tail(self, &parts),
            false => None,
        };
        let Some(tail) = tail else {
            return body::frame(&*self.whole(), max_message).map(|framed| (framed, None));
        };
        let own: usize = parts.own.iter().map(|(tag, v)| string_len(*tag, v)).sum();
        let prefix_len = body::prefix_len(own + tail.len(), max_message)?;
        let mut head = BytesMut::with_capacity(body::PREFIX + own);
        head.put_u8(0);
        head.put_u32(prefix_len);
        for (tag, value) in parts.own {
            if !value.is_empty() {
                encoding::encode_key(tag, WireType::LengthDelimited, &mut head);
                encoding::encode_varint(value.len() as u64, &mut head);
                head.put_slice(value.as_bytes());
            }
        }
        debug_assert_eq!(head.len(), body::PREFIX + own);
        Ok((head.freeze(), Some(tail)))
    }
}

impl Shareable for WireResponse {
    type Message = WireResponse;
    fn parts(&self) -> Parts<'_> {
        Parts {
            delta: false,
            own: [(1, &self.version_info), (5, &self.nonce)],
            items: &self.resources,
            list: None,
            type_url: &self.type_url,
            control_plane: &self.control_plane,
            resource_errors: &self.resource_errors,
            removed: &[],
        }
    }
    fn whole(&self) -> std::borrow::Cow<'_, WireResponse> {
        std::borrow::Cow::Borrowed(self)
    }
    fn rest(&self) -> WireResponse {
        WireResponse {
            version_info: String::new(),
            nonce: String::new(),
            ..self.clone()
        }
    }
}

impl Shareable for WireDeltaResponse {
    type Message = WireDeltaResponse;
    fn parts(&self) -> Parts<'_> {
        Parts {
            delta: true,
            own: [(1, &self.system_version_info), (5, &self.nonce)],
            items: &self.resources,
            list: None,
            type_url: &self.type_url,
            control_plane: &self.control_plane,
            resource_errors: &self.resource_errors,
            removed: &self.removed_resources,
        }
    }
    fn whole(&self) -> std::borrow::Cow<'_, WireDeltaResponse> {
        std::borrow::Cow::Borrowed(self)
    }
    fn rest(&self) -> WireDeltaResponse {
        WireDeltaResponse {
            system_version_info: String::new(),
            nonce: String::new(),
            ..self.clone()
        }
    }
}

/// The tails a server's streams share ([`Listing::frame_shared`]): the latest kept,
/// at most [`SHARED_TAILS`] of them and [`SHARED_TAIL_BYTES`] together.
#[derive(Default)]
pub struct SharedTails(std::sync::Mutex<std::collections::VecDeque<SharedTail>>);

impl std::fmt::Debug for SharedTails {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedTails")
    }
}

impl SharedTails {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<SharedTail>> {
        // Poisoned only by a panic mid-push; the list is whole.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `wire`'s fields but its version and nonce, encoded: the one kept if there is one,
    /// else encoded now and kept; `None` when it is too large to keep (framed whole then).
    fn tail(&self, wire: &impl Shareable, parts: &Parts<'_>) -> Option<Bytes> {
        if let Some(found) = self.lock().iter().find(|t| parts.are(&t.key)) {
            return Some(found.bytes.clone());
        }
        let rest = wire.rest();
        if rest.encoded_len() > SHARED_TAIL_BYTES / SHARED_TAILS {
            return None;
        }
        let bytes = Bytes::from(rest.encode_to_vec());
        let mut tails = self.lock();
        let mut held: usize = tails.iter().map(|t| t.bytes.len()).sum();
        while tails.len() >= SHARED_TAILS || held + bytes.len() > SHARED_TAIL_BYTES {
            let Some(oldest) = tails.pop_front() else {
                break;
            };
            held -= oldest.bytes.len();
        }
        tails.push_back(SharedTail {
            key: parts.key(),
            bytes: bytes.clone(),
        });
        Some(bytes)
    }
}

/// A string field's encoded length, nothing when empty (as prost writes it).
fn string_len(tag: u32, value: &str) -> usize {
    if value.is_empty() {
        0
    } else {
        encoding::key_len(tag) + encoding::encoded_len_varint(value.len() as u64) + value.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::ResourceType;
    use envoy_types::pb::envoy::config::core::v3::ControlPlane;
    use envoy_types::pb::envoy::service::discovery::v3::{
        DiscoveryResponse, Resource as PbResource,
    };
    use envoy_types::pb::google::protobuf::{Any, Duration as PbDuration};
    use std::sync::Arc;

    /// Framed as `head` then `tail` (a shared one), `whole` decodes as the generated type
    /// `M` to what `whole` framed at once does, and is as long: returned, decoded.
    pub(super) fn framed_as_whole<M: Message + Default + PartialEq + std::fmt::Debug>(
        head: &[u8],
        tail: &[u8],
        whole: &impl Message,
    ) -> M {
        let framed = crate::server::body::frame(whole, 1 << 20).expect("framed");
        let parts = [head, tail].concat();
        let decode = |b: &[u8]| M::decode(&b[crate::server::body::PREFIX..]).expect("decodes");
        assert_eq!(decode(&parts), decode(&framed));
        assert_eq!(parts.len(), framed.len());
        decode(&parts)
    }

    /// `count` ClusterLoadAssignments named `{prefix}-{i}`, each of `len` bytes of `i`.
    pub(super) fn endpoints(prefix: &str, count: u8, len: usize) -> Vec<Arc<Resource>> {
        (0..count)
            .map(|i| {
                let name = format!("{prefix}-{i}");
                Arc::new(Resource::new(
                    ResourceType::Endpoint,
                    name,
                    "v",
                    vec![i; len],
                    None,
                ))
            })
            .collect()
    }

    /// P32: what the generated types make of `NOT_FOUND` for `names`.
    pub(super) fn expected_errors(
        names: &[String],
    ) -> Vec<envoy_types::pb::envoy::service::discovery::v3::ResourceError> {
        use envoy_types::pb::envoy::service::discovery::v3::{ResourceError, ResourceName};
        names
            .iter()
            .map(|name| ResourceError {
                resource_name: Some(ResourceName {
                    name: name.clone(),
                    ..Default::default()
                }),
                error_detail: Some(envoy_types::pb::google::rpc::Status {
                    code: tonic::Code::NotFound as i32,
                    message: crate::protocol::NOT_FOUND_MESSAGE.into(),
                    details: vec![],
                }),
            })
            .collect()
    }

    #[test]
    fn encodes_exactly_like_the_generated_discovery_response() {
        let big = vec![9u8; 70_000]; // a length that needs a 3-byte varint
        let resources: Vec<Arc<Resource>> = [vec![], vec![1, 2, 3], big]
            .into_iter()
            .enumerate()
            .map(|(i, body)| {
                Arc::new(
                    Resource::new(ResourceType::Cluster, format!("c{i}"), "v", body, None)
                        // One resource with a TTL, wrapped when the client takes TTLs.
                        .with_ttl((i == 1).then(|| Duration::from_millis(1500))),
                )
            })
            .collect();
        for (version, nonce, control_plane, wrap_ttl, not_found) in [
            ("v1", "7", "switchyard/1", false, vec![]),
            ("", "", "", false, vec!["gone".to_string()]),
            (
                "v2",
                "8",
                "switchyard/1",
                true,
                vec!["a".into(), "b".into()],
            ),
        ] {
            let wire = WireResponse::new(
                Response {
                    kind: ResourceType::Cluster,
                    version: version.into(),
                    nonce: nonce.into(),
                    resources: resources.clone().into(),
                    wrap_ttl,
                    not_found: not_found.clone(),
                },
                control_plane,
                Secrets::Serve,
            );
            let any = |r: &Resource| Any {
                type_url: ResourceType::Cluster.type_url().into(),
                value: r.body.to_vec(),
            };
            let expected = DiscoveryResponse {
                version_info: version.into(),
                resources: resources
                    .iter()
                    .map(|r| match r.ttl.filter(|_| wrap_ttl) {
                        // P26: a resource with a TTL goes out in a `Resource` wrapper.
                        Some(ttl) => Any {
                            type_url: RESOURCE_TYPE_URL.into(),
                            value: PbResource {
                                name: r.name.clone(),
                                version: r.version.clone(),
                                resource: Some(any(r)),
                                ttl: Some(PbDuration {
                                    seconds: ttl.as_secs() as i64,
                                    nanos: ttl.subsec_nanos() as i32,
                                }),
                                ..Default::default()
                            }
                            .encode_to_vec(),
                        },
                        None => any(r),
                    })
                    .collect(),
                type_url: ResourceType::Cluster.type_url().into(),
                nonce: nonce.into(),
                control_plane: (!control_plane.is_empty()).then(|| ControlPlane {
                    identifier: control_plane.into(),
                }),
                resource_errors: expected_errors(&not_found),
                ..Default::default()
            };
            let bytes = wire.encode_to_vec();
            assert_eq!(bytes.len(), wire.encoded_len());
            assert_eq!(
                DiscoveryResponse::decode(bytes.as_slice()).expect("decodes"),
                expected
            );
            assert_eq!(bytes, expected.encode_to_vec(), "byte for byte");
            // Framed in parts, the same message.
            let (head, shared) = wire
                .frame_parts(1 << 20, &SharedTails::default())
                .expect("framed");
            assert_eq!(
                shared.is_some(),
                !wrap_ttl,
                "what is wrapped for one client is its own"
            );
            let whole = [&head[..], shared.as_deref().unwrap_or_default()].concat();
            let len = u32::from_be_bytes([whole[1], whole[2], whole[3], whole[4]]) as usize;
            assert_eq!(
                (whole[0], len),
                (0, whole.len() - crate::server::body::PREFIX)
            );
            assert_eq!(
                DiscoveryResponse::decode(&whole[crate::server::body::PREFIX..]).expect("decodes"),
                expected
            );
        }
    }

    /// Streams that send the same resources share the bytes of everything but their
    /// version and nonce; other resources, or another secrets setting, are other bytes.
    /// A selection shared by streams goes out as its resources each would, from one buffer
    /// found by the list; wrapped with TTLs (P26), it is the client's own.
    #[test]
    fn a_shared_selection_goes_out_as_its_resources_each_would_from_one_buffer() {
        let list: Arc<[Arc<Resource>]> = endpoints("slist", 3, 100).into();
        let response = |nonce: &str, resources: Resources, wrap_ttl| Response {
            kind: ResourceType::Endpoint,
            version: format!("v-{nonce}"),
            nonce: nonce.into(),
            resources,
            wrap_ttl,
            not_found: vec![],
        };
        let tails = SharedTails::default();
        let shared = |nonce: &str| {
            SotwWire::new(
                response(nonce, Resources::Shared(Arc::clone(&list)), false),
                "switchyard/1",
                Secrets::Serve,
            )
            .frame_shared(1 << 20, &tails)
            .expect("framed")
        };
        let ((head, a), (_, b)) = (shared("1"), shared("2"));
        let (a, b) = (a.expect("shared"), b.expect("shared"));
        assert_eq!(a.as_ptr(), b.as_ptr(), "one buffer for the one list");
        let each = WireResponse::new(
            response("1", list.to_vec().into(), false),
            "switchyard/1",
            Secrets::Serve,
        );
        let sent: DiscoveryResponse = framed_as_whole(&head, &a, &each);
        assert_eq!(sent.resources.len(), list.len());
        // With TTLs to wrap (P26), each goes wrapped, as the client's own.
        let ttl: Arc<[Arc<Resource>]> = list
            .iter()
            .map(|r| Arc::new(Resource::clone(r).with_ttl(Some(Duration::from_secs(30)))))
            .collect();
        let wrapped = SotwWire::new(
            response("3", Resources::Shared(Arc::clone(&ttl)), true),
            "switchyard/1",
            Secrets::Serve,
        );
        let (framed, tail) = wrapped.frame_shared(1 << 20, &tails).expect("framed");
        assert!(tail.is_none(), "wrapped for this client: framed whole");
        let each = WireResponse::new(
            response("3", ttl.to_vec().into(), true),
            "switchyard/1",
            Secrets::Serve,
        );
        assert_eq!(
            framed,
            crate::server::body::frame(&each, 1 << 20).expect("framed")
        );
    }

    #[test]
    fn the_same_resources_are_sent_from_one_shared_buffer() {
        let resources = endpoints("shared", 3, 100);
        let wire = |nonce: &str, resources: &[Arc<Resource>], secrets| {
            WireResponse::new(
                Response {
                    kind: ResourceType::Endpoint,
                    version: format!("v-{nonce}"),
                    nonce: nonce.into(),
                    resources: resources.to_vec().into(),
                    wrap_ttl: false,
                    not_found: vec![],
                },
                "switchyard/1",
                secrets,
            )
        };
        let tails = SharedTails::default();
        let frame = |w: WireResponse| w.frame_parts(1 << 20, &tails).expect("framed");
        let (a_head, a) = frame(wire("1", &resources, Secrets::Serve));
        let (b_head, b) = frame(wire("2", &resources, Secrets::Serve));
        let (a, b) = (a.expect("shared"), b.expect("shared"));
        assert_eq!(a.as_ptr(), b.as_ptr(), "one buffer");
        assert_ne!(a_head, b_head, "each its own nonce");
        let (_, other) = frame(wire("3", &resources[1..], Secrets::Serve));
        assert_ne!(other.expect("shared").as_ptr(), a.as_ptr());
        let (_, redacted) = frame(wire("4", &resources, Secrets::Redact));
        assert_ne!(redacted.expect("shared").as_ptr(), a.as_ptr());
        let (alone, none) = frame(wire("5", &resources[..1], Secrets::Serve));
        assert!(none.is_none(), "one resource: framed whole");
        assert_eq!(
            alone,
            crate::server::body::frame(&wire("5", &resources[..1], Secrets::Serve), 1 << 20)
                .expect("framed")
        );
        // Over the limit, as when framed whole.
        let over = wire("6", &resources, Secrets::Serve).frame_parts(100, &tails);
        assert_eq!(over.expect_err("too large").code(), tonic::Code::OutOfRange);
        // A kept tail keeps no resource alive: the snapshot's going frees them.
        let held = Arc::downgrade(&resources[0]);
        drop(resources);
        assert_eq!(held.strong_count(), 0, "only weak references in the tails");
        // A tail too large to keep: framed whole, every time.
        let big = endpoints("big", 2, SHARED_TAIL_BYTES / SHARED_TAILS);
        let (whole, none) = wire("7", &big, Secrets::Serve)
            .frame_parts(1 << 30, &tails)
            .expect("framed");
        assert!(none.is_none());
        assert_eq!(
            whole.len(),
            wire("7", &big, Secrets::Serve).encoded_len() + crate::server::body::PREFIX
        );
    }
}

#[cfg(test)]
mod delta_tests {
    use super::*;
    use crate::resource::ResourceType;
    use envoy_types::pb::envoy::config::core::v3::ControlPlane;
    use envoy_types::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryResponse, Resource as PbResource,
    };
    use envoy_types::pb::google::protobuf::{Any, Duration as PbDuration};
    use std::sync::Arc;

    #[test]
    fn delta_encodes_exactly_like_the_generated_delta_discovery_response() {
        let big = Arc::new(Resource::new(
            ResourceType::Cluster,
            "big",
            "v9",
            vec![7u8; 70_000],
            None,
        ));
        let small = Arc::new(Resource::new(
            ResourceType::Cluster,
            "small",
            "v1",
            vec![1, 2],
            None,
        ));
        let items = vec![
            DeltaResource {
                resource: Arc::clone(&big),
                aliases: vec![],
                ttl: None,
                body: true,
            },
            DeltaResource {
                resource: Arc::clone(&small),
                aliases: vec!["a1".into(), "a2".into()],
                ttl: Some(Duration::from_millis(2500)),
                body: true,
            },
            DeltaResource {
                resource: Arc::clone(&small),
                aliases: vec![],
                ttl: Some(Duration::from_secs(30)),
                body: false,
            },
        ];
        for (version, nonce, cp, removed) in [
            (
                "sv",
                "3",
                "switchyard/1",
                vec!["gone".to_string(), "x".into()],
            ),
            ("", "", "", vec![]),
        ] {
            let wire = WireDeltaResponse::new(
                DeltaResponse {
                    kind: ResourceType::Cluster,
                    system_version: version.into(),
                    nonce: nonce.into(),
                    resources: items.clone().into(),
                    removed: removed.clone(),
                    not_found: removed.clone(),
                },
                cp,
                Secrets::Serve,
            );
            let any = |r: &Resource| Any {
                type_url: ResourceType::Cluster.type_url().into(),
                value: r.body.to_vec(),
            };
            let expected = DeltaDiscoveryResponse {
                system_version_info: version.into(),
                resources: vec![
                    PbResource {
                        name: "big".into(),
                        version: "v9".into(),
                        resource: Some(any(&big)),
                        ..Default::default()
                    },
                    PbResource {
                        name: "small".into(),
                        version: "v1".into(),
                        aliases: vec!["a1".into(), "a2".into()],
                        resource: Some(any(&small)),
                        ttl: Some(PbDuration {
                            seconds: 2,
                            nanos: 500_000_000,
                        }),
                        ..Default::default()
                    },
                    PbResource {
                        name: "small".into(),
                        version: "v1".into(),
                        ttl: Some(PbDuration {
                            seconds: 30,
                            nanos: 0,
                        }),
                        ..Default::default()
                    },
                ],
                type_url: ResourceType::Cluster.type_url().into(),
                nonce: nonce.into(),
                resource_errors: super::tests::expected_errors(&removed),
                removed_resources: removed,
                control_plane: (!cp.is_empty()).then(|| ControlPlane {
                    identifier: cp.into(),
                }),
                ..Default::default()
            };
            let bytes = wire.encode_to_vec();
            assert_eq!(bytes.len(), wire.encoded_len());
            assert_eq!(
                DeltaDiscoveryResponse::decode(bytes.as_slice()).expect("decodes"),
                expected
            );
            assert_eq!(bytes, expected.encode_to_vec(), "byte for byte");
            // Aliases and TTLs are this client's own: framed whole.
            let (_, shared) = wire
                .frame_parts(1 << 20, &SharedTails::default())
                .expect("framed");
            assert!(shared.is_none());
        }
    }

    /// Delta streams that send the same resources as the snapshot has them share the bytes
    /// of all but their system version and nonce; decoded, it is the same message.
    #[test]
    fn delta_responses_of_the_same_resources_share_one_buffer() {
        let resources = super::tests::endpoints("dshared", 3, 50);
        let wire = |nonce: &str, removed: Vec<String>| {
            WireDeltaResponse::new(
                DeltaResponse {
                    kind: ResourceType::Endpoint,
                    system_version: format!("sv-{nonce}"),
                    nonce: nonce.into(),
                    resources: resources
                        .iter()
                        .map(|r| DeltaResource {
                            resource: Arc::clone(r),
                            aliases: vec![],
                            ttl: None,
                            body: true,
                        })
                        .collect(),
                    removed,
                    not_found: vec![],
                },
                "switchyard/1",
                Secrets::Serve,
            )
        };
        let tails = SharedTails::default();
        let parts = |w: &WireDeltaResponse| w.frame_parts(1 << 20, &tails).expect("framed");
        let (one, two) = (wire("1", vec![]), wire("2", vec![]));
        let (head, a) = parts(&one);
        let (_, b) = parts(&two);
        let (a, b) = (a.expect("shared"), b.expect("shared"));
        assert_eq!(a.as_ptr(), b.as_ptr(), "one buffer");
        let whole = [&head[..], &a[..]].concat();
        let framed = crate::server::body::frame(&one, 1 << 20).expect("framed");
        let decode = |b: &[u8]| {
            DeltaDiscoveryResponse::decode(&b[crate::server::body::PREFIX..]).expect("decodes")
        };
        assert_eq!(decode(&whole), decode(&framed));
        assert_eq!(whole.len(), framed.len());
        let (_, removing) = parts(&wire("3", vec!["gone".into()]));
        assert_ne!(
            removing.expect("shared").as_ptr(),
            a.as_ptr(),
            "other removals"
        );
    }

    #[test]
    fn a_shared_list_goes_out_as_its_resources_each_would_from_one_buffer_found_by_the_list() {
        let list: Arc<[Arc<Resource>]> = super::tests::endpoints("dlist", 3, 50).into();
        let response = |nonce: &str, resources: DeltaResources| DeltaResponse {
            kind: ResourceType::Endpoint,
            system_version: format!("sv-{nonce}"),
            nonce: nonce.into(),
            resources,
            removed: vec![],
            not_found: vec![],
        };
        let shared = |nonce: &str, list: &Arc<[Arc<Resource>]>, secrets| {
            DeltaWire::new(
                response(nonce, DeltaResources::shared(Arc::clone(list))),
                "switchyard/1",
                secrets,
            )
        };
        let tails = SharedTails::default();
        let (head, a) = shared("1", &list, Secrets::Serve)
            .frame_shared(1 << 20, &tails)
            .expect("framed");
        let (_, b) = shared("2", &list, Secrets::Serve)
            .frame_shared(1 << 20, &tails)
            .expect("framed");
        let (a, b) = (a.expect("shared"), b.expect("shared"));
        assert_eq!(a.as_ptr(), b.as_ptr(), "one buffer for the one list");
        // What the same resources each in hand frame to, byte for byte.
        let each = WireDeltaResponse::new(
            response("1", DeltaResources::shared(Arc::clone(&list))),
            "switchyard/1",
            Secrets::Serve,
        );
        let sent: DeltaDiscoveryResponse = super::tests::framed_as_whole(&head, &a, &each);
        assert_eq!(sent.resources.len(), list.len());
        // An equal list that is not the same one, or other secrets: another tail.
        let copy: Arc<[Arc<Resource>]> = list.iter().cloned().collect();
        let (_, other) = shared("3", &copy, Secrets::Serve)
            .frame_shared(1 << 20, &tails)
            .expect("framed");
        assert_ne!(other.expect("shared").as_ptr(), a.as_ptr(), "another list");
        let (_, redacted) = shared("4", &list, Secrets::Redact)
            .frame_shared(1 << 20, &tails)
            .expect("framed");
        assert_ne!(
            redacted.expect("shared").as_ptr(),
            a.as_ptr(),
            "other secrets"
        );
        // Over the limit: framed whole, and refused as the whole would be.
        let over = shared("5", &list, Secrets::Serve).frame_shared(100, &tails);
        assert_eq!(
            over.map(|_| ()).map_err(|s| s.code()),
            crate::server::body::frame(&each, 100)
                .map(|_| ())
                .map_err(|s| s.code())
        );
    }
}
