//! What a simulated proxy's ADS stream puts on the wire: its requests (SotW or delta) with
//! its node as Envoy sends it, `node.extensions` of Envoy's size encoded once per run and
//! shared by every request.
//!
//! Must not: hold protocol state (`proxy`'s) or run a stream (`run`'s).

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use prost::Message;

use crate::proxy::{Outgoing, Proxy};

/// `node.extensions` as Envoy sends it, `count` entries of about Envoy's size (a name, a
/// category, a type URL): encoded once per run, and shared by every proxy's requests.
pub(crate) fn node_extensions(count: u32) -> bytes::Bytes {
    use envoy_types::pb::envoy::config::core::v3::Extension;
    let categories = [
        "envoy.filters.http",
        "envoy.filters.network",
        "envoy.transport_sockets.upstream",
        "envoy.access_loggers",
    ];
    let extensions = (0..count as usize)
        .map(|i| {
            let category = categories[i % categories.len()];
            Extension {
                name: format!("{category}.loadgen_{i:04}"),
                category: category.to_string(),
                type_urls: vec![format!(
                    "envoy.extensions.{}.loadgen_{i:04}.v3.Config",
                    category.trim_start_matches("envoy.")
                )],
                ..Default::default()
            }
        })
        .collect();
    // A node of nothing but extensions encodes as exactly their field entries.
    Node {
        extensions,
        ..Default::default()
    }
    .encode_to_vec()
    .into()
}

/// A request as a proxy puts it on the wire: its node, with the extensions encoded once
/// for the run appended (protobuf merges a message's fields in any order), then the rest.
#[derive(Debug)]
pub(crate) struct OnTheWire<R> {
    /// The request, its node taken out.
    request: R,
    node: Option<Node>,
    extensions: bytes::Bytes,
    /// The request's node field number.
    node_tag: u32,
}

impl<R> OnTheWire<R> {
    fn node_len(&self) -> Option<usize> {
        self.node
            .as_ref()
            .map(|node| node.encoded_len() + self.extensions.len())
    }
}

impl<R: Message> Message for OnTheWire<R> {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        use prost::encoding::{encode_key, encode_varint, WireType};
        if let (Some(node), Some(len)) = (&self.node, self.node_len()) {
            encode_key(self.node_tag, WireType::LengthDelimited, buf);
            encode_varint(len as u64, buf);
            node.encode_raw(buf);
            buf.put_slice(&self.extensions);
        }
        self.request.encode_raw(buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        // Only ever encoded.
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        use prost::encoding::{encoded_len_varint, key_len};
        let node = self.node_len().map_or(0, |len| {
            key_len(self.node_tag) + encoded_len_varint(len as u64) + len
        });
        node + self.request.encoded_len()
    }

    fn clear(&mut self) {
        self.request.clear();
        self.node = None;
    }
}

/// What differs between a SotW and a delta ADS stream, for [`ads_stream`].
pub(crate) trait Ads {
    type Request: Message + Send + 'static;
    type Response: Message + Default + Send + 'static;
    /// The method's path.
    const PATH: &'static str;
    /// The request's node field number.
    const NODE_TAG: u32;
    /// The request of `out`, its node taken out.
    fn take(out: Outgoing) -> Option<(Self::Request, Option<Node>)>;
    fn type_url(response: &Self::Response) -> &str;
    fn apply(proxy: &mut Proxy, response: &Self::Response) -> Vec<Outgoing>;

    /// `out` as it goes on the wire, with the run's `extensions` in its node.
    fn on_the_wire(out: Outgoing, extensions: &bytes::Bytes) -> Option<OnTheWire<Self::Request>> {
        let (request, node) = Self::take(out)?;
        Some(OnTheWire {
            request,
            node,
            extensions: extensions.clone(),
            node_tag: Self::NODE_TAG,
        })
    }
}

pub(crate) struct SotwAds;
pub(crate) struct DeltaAds;

impl Ads for SotwAds {
    type Request = DiscoveryRequest;
    type Response = DiscoveryResponse;
    const PATH: &'static str =
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
    const NODE_TAG: u32 = 2;
    fn take(out: Outgoing) -> Option<(DiscoveryRequest, Option<Node>)> {
        match out {
            Outgoing::Sotw(mut r) => {
                let node = r.node.take();
                Some((r, node))
            }
            Outgoing::Delta(_) => None,
        }
    }
    fn type_url(response: &DiscoveryResponse) -> &str {
        &response.type_url
    }
    fn apply(proxy: &mut Proxy, response: &DiscoveryResponse) -> Vec<Outgoing> {
        proxy.on_sotw(response)
    }
}

impl Ads for DeltaAds {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaDiscoveryResponse;
    const PATH: &'static str =
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";
    const NODE_TAG: u32 = 1;
    fn take(out: Outgoing) -> Option<(DeltaDiscoveryRequest, Option<Node>)> {
        match out {
            Outgoing::Delta(mut r) => {
                let node = r.node.take();
                Some((r, node))
            }
            Outgoing::Sotw(_) => None,
        }
    }
    fn type_url(response: &DeltaDiscoveryResponse) -> &str {
        &response.type_url
    }
    fn apply(proxy: &mut Proxy, response: &DeltaDiscoveryResponse) -> Vec<Outgoing> {
        proxy.on_delta(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::ENVOY_EXTENSIONS;
    use crate::proxy::{CDS, EDS};

    /// What goes on the wire is the request with the whole node, extensions and all, of
    /// about Envoy 1.40's size at its count.
    #[test]
    fn requests_carry_an_envoy_sized_node_encoded_once() {
        let extensions = node_extensions(ENVOY_EXTENSIONS);
        let envoy = 59_657;
        assert!(
            extensions.len().abs_diff(envoy) < envoy / 10,
            "{} bytes of extensions, Envoy's are {envoy}",
            extensions.len()
        );
        let node = Node {
            id: "loadgen-7".into(),
            cluster: "c".into(),
            ..Default::default()
        };
        let request = DiscoveryRequest {
            node: Some(node.clone()),
            type_url: EDS.into(),
            resource_names: vec!["a".into(), "b".into()],
            response_nonce: "n".into(),
            ..Default::default()
        };
        let (rest, taken) = SotwAds::take(Outgoing::Sotw(request.clone())).expect("sotw");
        let wire = OnTheWire {
            request: rest,
            node: taken,
            extensions: extensions.clone(),
            node_tag: SotwAds::NODE_TAG,
        };
        let bytes = wire.encode_to_vec();
        assert_eq!(bytes.len(), wire.encoded_len());
        let decoded = DiscoveryRequest::decode(&bytes[..]).expect("decodes");
        let mut expected = request;
        expected.node = Some(Node {
            extensions: Node::decode(&extensions[..]).expect("node").extensions,
            ..node
        });
        assert_eq!(decoded, expected);
        assert_eq!(decoded.node.expect("node").extensions.len(), 516);
        // Delta's node is field 1; none at all is none on the wire.
        let (rest, taken) = DeltaAds::take(Outgoing::Delta(DeltaDiscoveryRequest {
            type_url: CDS.into(),
            ..Default::default()
        }))
        .expect("delta");
        let wire = OnTheWire {
            request: rest,
            node: taken,
            extensions,
            node_tag: DeltaAds::NODE_TAG,
        };
        let decoded = DeltaDiscoveryRequest::decode(&wire.encode_to_vec()[..]).expect("decodes");
        assert_eq!(decoded.node, None);
        assert_eq!(decoded.type_url, CDS);
    }
}
