//! The xDS resource types Switchyard serves, and the one table of their facts: type URL,
//! protobuf message, snapshot-file key, and protocol properties.
//!
//! Owns: the mapping between type URLs, file keys and message names; a loaded [`Resource`]
//! in its encoded forms (as written, and without its secret material where it has any) and
//! which form a [`Secrets`] policy reads; a [`Reference`] from one resource to another. Must
//! not: know about files, streams or sockets, or which fields are secret (`config::redact` says,
//! from the descriptors, when the loader makes the forms).

use std::fmt;
use std::time::Duration;

use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::google::protobuf::Any;

pub mod envoy;
pub mod xdstp;

/// Prefix of every type URL.
pub const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

/// An xDS resource type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    Cluster,
    Endpoint,
    Listener,
    Route,
    ScopedRoute,
    VirtualHost,
    Secret,
    Runtime,
    ExtensionConfig,
    /// LEDS (P34): one endpoint of a ClusterLoadAssignment's locality, named by an xdstp URL
    /// in a glob collection; Incremental xDS only.
    LbEndpoint,
}

/// Everything Switchyard knows about one resource type: the one table every per-type fact
/// comes from (file keys, type URLs, REST paths, gRPC services, send order, ...).
#[derive(Debug)]
pub struct TypeFacts {
    pub kind: ResourceType,
    /// Fully qualified protobuf message name.
    pub message: &'static str,
    /// The type URL on the wire: [`TYPE_URL_PREFIX`] and the message name.
    pub type_url: &'static str,
    /// The key of this type's list in a snapshot file.
    pub file_key: &'static str,
    /// The conventional short name (CDS, EDS, ...), for logs and tables.
    pub short_name: &'static str,
    /// The message field that names a resource.
    pub name_field: &'static str,
    /// REST-JSON polling: `POST /v3/<rest_path>`; `None` where Envoy has no REST API (VHDS).
    pub rest_path: Option<&'static str>,
    /// The per-type gRPC service, its SotW method (none for VHDS, P24) and its delta method.
    pub service: &'static str,
    pub sotw_method: Option<&'static str>,
    pub delta_method: &'static str,
    /// Position in [`ResourceType::SEND_ORDER`].
    pub send_rank: usize,
    /// Rule P10: SotW responses to a subscription by name carry every name asked for, so a
    /// resource left out of one is deleted (LDS, CDS: gRPC's xDS client takes a listener or
    /// cluster it asked for and did not get as deleted). A subscription by wildcard gets the
    /// whole set of any type ([`ResourceType::sotw_whole`]).
    pub whole_when_named: bool,
    /// What Envoy 1.40 does with the type: how it subscribes, over which transports, what it
    /// does with a name it no longer gets (`resource::envoy`, docs/protocol.md).
    pub envoy: &'static envoy::EnvoyFacts,
}

macro_rules! facts {
    ($kind:ident, $message:literal, $file_key:literal, $short:literal, $name_field:literal,
     $rest:expr, $service:literal, $sotw:expr, $delta:literal, $rank:literal, $full:literal,
     $envoy:ident) => {
        TypeFacts {
            kind: ResourceType::$kind,
            message: $message,
            type_url: concat!("type.googleapis.com/", $message),
            file_key: $file_key,
            short_name: $short,
            name_field: $name_field,
            rest_path: $rest,
            service: $service,
            sotw_method: $sotw,
            delta_method: $delta,
            send_rank: $rank,
            whole_when_named: $full,
            envoy: &envoy::$envoy,
        }
    };
}

/// The table, in [`ResourceType::ALL`] order. The send order (P30) puts what others refer to
/// first: secrets, clusters and their endpoints, then listeners, their routes, scoped routes,
/// virtual hosts, extension configs, runtimes.
#[rustfmt::skip]
const TYPES: [TypeFacts; 10] = [
    facts!(Cluster, "envoy.config.cluster.v3.Cluster", "clusters", "CDS", "name",
        Some("discovery:clusters"), "envoy.service.cluster.v3.ClusterDiscoveryService",
        Some("StreamClusters"), "DeltaClusters", 1, true, CDS),
    facts!(Endpoint, "envoy.config.endpoint.v3.ClusterLoadAssignment", "endpoints", "EDS",
        "cluster_name", Some("discovery:endpoints"),
        "envoy.service.endpoint.v3.EndpointDiscoveryService", Some("StreamEndpoints"),
        "DeltaEndpoints", 2, false, EDS),
    facts!(Listener, "envoy.config.listener.v3.Listener", "listeners", "LDS", "name",
        Some("discovery:listeners"), "envoy.service.listener.v3.ListenerDiscoveryService",
        Some("StreamListeners"), "DeltaListeners", 4, true, LDS),
    facts!(Route, "envoy.config.route.v3.RouteConfiguration", "routes", "RDS", "name",
        Some("discovery:routes"), "envoy.service.route.v3.RouteDiscoveryService",
        Some("StreamRoutes"), "DeltaRoutes", 5, false, RDS),
    facts!(ScopedRoute, "envoy.config.route.v3.ScopedRouteConfiguration", "scoped_routes",
        "SRDS", "name", Some("discovery:scoped-routes"),
        "envoy.service.route.v3.ScopedRoutesDiscoveryService", Some("StreamScopedRoutes"),
        "DeltaScopedRoutes", 6, false, SRDS),
    // VHDS exists only as a delta service (P24), and has no REST API.
    facts!(VirtualHost, "envoy.config.route.v3.VirtualHost", "virtual_hosts", "VHDS", "name",
        None, "envoy.service.route.v3.VirtualHostDiscoveryService", None, "DeltaVirtualHosts",
        7, false, VHDS),
    facts!(Secret, "envoy.extensions.transport_sockets.tls.v3.Secret", "secrets", "SDS",
        "name", Some("discovery:secrets"), "envoy.service.secret.v3.SecretDiscoveryService",
        Some("StreamSecrets"), "DeltaSecrets", 0, false, SDS),
    facts!(Runtime, "envoy.service.runtime.v3.Runtime", "runtimes", "RTDS", "name",
        Some("discovery:runtime"), "envoy.service.runtime.v3.RuntimeDiscoveryService",
        Some("StreamRuntime"), "DeltaRuntime", 9, false, RTDS),
    facts!(ExtensionConfig, "envoy.config.core.v3.TypedExtensionConfig", "extension_configs",
        "ECDS", "name", Some("discovery:extension_configs"),
        "envoy.service.extension.v3.ExtensionConfigDiscoveryService",
        Some("StreamExtensionConfigs"), "DeltaExtensionConfigs", 8, false, ECDS),
    // LEDS (P34): delta only, no REST API. An LbEndpoint has no name field: its name, an
    // xdstp URL, is Switchyard's key `name` beside its fields in a snapshot file.
    facts!(LbEndpoint, "envoy.config.endpoint.v3.LbEndpoint", "lb_endpoints", "LEDS", "name",
        None, "envoy.service.endpoint.v3.LocalityEndpointDiscoveryService", None,
        "DeltaLocalityEndpoints", 3, false, LEDS),
];

impl ResourceType {
    /// Every type (the order of per-type arrays and tables).
    pub const ALL: [ResourceType; 10] = {
        let mut all = [ResourceType::Cluster; 10];
        let mut i = 0;
        while i < TYPES.len() {
            all[i] = TYPES[i].kind;
            i += 1;
        }
        all
    };

    /// The order in which an aggregated stream sends types that have something to send at
    /// once (make-before-break, P30): the table's `send_rank`s.
    pub const SEND_ORDER: [ResourceType; 10] = {
        let mut order = [ResourceType::Cluster; 10];
        let mut i = 0;
        while i < TYPES.len() {
            order[TYPES[i].send_rank] = TYPES[i].kind;
            i += 1;
        }
        order
    };

    /// This type's row of the table.
    pub const fn facts(self) -> &'static TypeFacts {
        &TYPES[self as usize]
    }

    /// Position in [`ResourceType::ALL`]; used to index per-type arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Fully qualified protobuf message name.
    pub fn message_name(self) -> &'static str {
        self.facts().message
    }

    /// The type URL on the wire.
    pub fn type_url(self) -> &'static str {
        self.facts().type_url
    }

    /// The type a type URL names, if Switchyard serves it.
    pub fn from_type_url(url: &str) -> Option<ResourceType> {
        ResourceType::ALL.into_iter().find(|t| t.type_url() == url)
    }

    /// The key of this type's list in a snapshot file.
    pub fn file_key(self) -> &'static str {
        self.facts().file_key
    }

    /// The conventional short name (CDS, EDS, ...), for logs and tables.
    pub fn short_name(self) -> &'static str {
        self.facts().short_name
    }

    /// The message field that names a resource of this type.
    pub fn name_field(self) -> &'static str {
        self.facts().name_field
    }

    /// Rule P10, P14: whether a SotW response of this type carries the client's whole set
    /// (so a resource left out of it is deleted), for a client that subscribes by wildcard
    /// (`wildcard`) or by name. What counts is how the client subscribed: Envoy takes every
    /// response to a wildcard watch as the whole set, whatever the type (CDS, LDS, SRDS:
    /// docs/protocol.md, "What Envoy does with each type"); by name, only LDS and CDS are
    /// whole ([`TypeFacts::whole_when_named`]).
    pub fn sotw_whole(self, wildcard: bool) -> bool {
        wildcard || self.facts().whole_when_named
    }

    /// What Envoy 1.40 does with this type (docs/protocol.md, "What Envoy does with each
    /// type").
    pub fn envoy(self) -> &'static envoy::EnvoyFacts {
        self.facts().envoy
    }

    /// The type a REST-JSON polling path (`discovery:clusters`, ...) names.
    pub fn from_rest_path(path: &str) -> Option<ResourceType> {
        ResourceType::ALL
            .into_iter()
            .find(|t| t.facts().rest_path == Some(path))
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}

/// A reference to a resource: its type and name (what a resource names, what a stream's
/// resources name, what the make-before-break planner orders by).
pub type Reference = (ResourceType, String);

/// One resource as loaded from a snapshot file: encoded to protobuf once, and shared (by
/// `Arc`) by every snapshot and stream that sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    pub kind: ResourceType,
    pub name: String,
    /// Content hash of the resource; equal content, equal version, in every process.
    pub version: String,
    /// The resource wrapped in a `google.protobuf.Any`, encoded: what a response carries,
    /// written to the wire as is.
    pub any: Bytes,
    /// The protobuf encoding of the resource message itself (a view into `any`).
    pub body: Bytes,
    /// For an EDS cluster: the ClusterLoadAssignment it needs to finish warming (rule P28).
    pub warms_with: Option<String>,
    /// How long a client that supports TTLs keeps the resource without hearing from the
    /// server (P25); `None`: for ever.
    pub ttl: Option<Duration>,
    /// Other names a client may subscribe to it by (P24): a VHDS virtual host
    /// `<route-config>/<vhost>` is also `<route-config>/<domain>` for each of its domains.
    /// Sorted, without duplicates.
    pub aliases: Vec<String>,
    /// What this resource names by type and name (the dependency graph the make-before-break
    /// plan and the reference checks read): a route's clusters (weighted ones too), a TCP
    /// proxy's cluster, a listener's RDS route configuration and ECDS filter configs, a
    /// scoped route's route configuration, an EDS cluster's ClusterLoadAssignment, a TLS
    /// context's SDS secrets; a route configuration with VHDS names its own virtual-host
    /// namespace. Sorted, without duplicates.
    pub references: Vec<Reference>,
    /// The resource without its secret material, encoded once, where it has any (see
    /// `config::redact`); `None` for the (many) resources without.
    pub redacted: Option<Box<Redacted>>,
    /// The resource as a proto3 JSON `Any` (with `"@type"`), for REST-JSON polling: rendered
    /// on first use and shared by every poll, like `any` is for gRPC. `None` inside if it
    /// cannot be rendered.
    any_json: Rendered,
    /// A 64-bit digest of the name and version, computed on first use (see
    /// [`Resource::selection_key`]).
    selection_key: Memo64,
    /// Where it was written (file, and place in the file's list), to name it when a proxy
    /// rejects it. Not part of its value.
    origin: Origin,
    /// Its regex with the largest RE2 program, if it has a regex: Envoy limits the size by
    /// the node's runtime, so the loader judges it per node group.
    regex_program: Option<Box<RegexProgram>>,
}

/// A regex (`RegexMatcher.regex`) and the size of the program RE2 compiles it to, as Envoy
/// counts it (`config::checks::re2`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegexProgram {
    /// Where in the resource, as field rules name places (`virtual_hosts[0]...regex`).
    pub path: String,
    pub pattern: String,
    pub size: u64,
}

/// A snapshot file a resource was read from, shared by its resources.
#[derive(Debug)]
pub struct SourceFile {
    pub path: std::path::PathBuf,
    /// When the file was last modified, as the load saw it.
    pub modified: Option<std::time::SystemTime>,
}

/// Where a resource was written: its file, and its index in the file's list of its type.
#[derive(Clone, Debug, Default)]
struct Origin(Option<(Arc<SourceFile>, usize)>);

impl PartialEq for Origin {
    fn eq(&self, _: &Origin) -> bool {
        true
    }
}

impl Eq for Origin {}

/// A lazily computed digest: not part of the resource's value.
#[derive(Clone, Debug, Default)]
struct Memo64(std::sync::OnceLock<u64>);

impl PartialEq for Memo64 {
    fn eq(&self, _: &Memo64) -> bool {
        true
    }
}

impl Eq for Memo64 {}

/// Which of a resource's forms to send or show: as written, or without its secret material
/// (what is secret is `config::redact`'s to say; who may see it, the server's and the admin API's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Secrets {
    /// Leave every sensitive field out (the default everywhere).
    #[default]
    Redact,
    /// Send resources as written.
    Serve,
}

impl Secrets {
    /// `Serve` when `serve` is set.
    pub fn serve_if(serve: bool) -> Secrets {
        if serve {
            Secrets::Serve
        } else {
            Secrets::Redact
        }
    }
}

/// A resource's forms without secret material (see `config::redact`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redacted {
    /// Without private key material, for proxies that have not proven who they are.
    pub for_proxy: Option<Encoded>,
    /// Without any sensitive field, for operators.
    pub for_operator: Option<Encoded>,
}

/// A message body and its `Any` wrapping, encoded once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    pub any: Bytes,
    /// A view into `any`.
    pub body: Bytes,
}

impl Encoded {
    fn new(kind: ResourceType, body: Vec<u8>) -> Encoded {
        let body_len = body.len();
        let any = Bytes::from(prost::Message::encode_to_vec(&Any {
            type_url: kind.type_url().to_string(),
            value: body,
        }));
        // `value` is the last field of an Any, so the body is the tail of its encoding.
        let body = any.slice(any.len() - body_len..);
        Encoded { any, body }
    }
}

/// A rendering cache: not part of the resource's value (it never affects equality).
#[derive(Clone, Debug, Default)]
struct Rendered(std::sync::OnceLock<Option<String>>);

impl PartialEq for Rendered {
    fn eq(&self, _: &Rendered) -> bool {
        true
    }
}

impl Eq for Rendered {}

impl Resource {
    /// A resource of `kind` whose message encodes to `body`.
    pub fn new(
        kind: ResourceType,
        name: impl Into<String>,
        version: impl Into<String>,
        body: Vec<u8>,
        warms_with: Option<String>,
    ) -> Resource {
        let Encoded { any, body } = Encoded::new(kind, body);
        Resource {
            kind,
            name: name.into(),
            version: version.into(),
            any,
            body,
            warms_with,
            ttl: None,
            aliases: Vec::new(),
            references: Vec::new(),
            redacted: None,
            any_json: Rendered::default(),
            selection_key: Memo64::default(),
            origin: Origin::default(),
            regex_program: None,
        }
    }

    /// The same resource, whose largest regex program is `program`.
    pub fn with_regex_program(mut self, program: Option<RegexProgram>) -> Resource {
        self.regex_program = program.map(Box::new);
        self
    }

    /// Its regex with the largest RE2 program, if it has a regex.
    pub fn regex_program(&self) -> Option<&RegexProgram> {
        self.regex_program.as_deref()
    }

    /// The same resource, written at `index` of its type's list in `file`.
    pub fn with_origin(mut self, file: Arc<SourceFile>, index: usize) -> Resource {
        self.origin = Origin(Some((file, index)));
        self
    }

    /// The file it was written in, and its index in that file's list of its type.
    pub fn origin(&self) -> Option<(&SourceFile, usize)> {
        self.origin.0.as_ref().map(|(f, i)| (f.as_ref(), *i))
    }

    /// Where it was written, as load errors name it: `listeners.yaml: listeners[1] "b"`
    /// (`LDS "b"` when it was not read from a file).
    pub fn written_at(&self) -> String {
        match self.origin() {
            Some((file, index)) => format!(
                "{}: {}[{index}] {:?}",
                file.path.display(),
                self.kind.file_key(),
                self.name
            ),
            None => format!("{} {:?}", self.kind, self.name),
        }
    }

    /// A digest of the name and version (the first 8 bytes of their SHA-256), computed once:
    /// what a selection's version sums, so computing one costs an addition per resource.
    pub fn selection_key(&self) -> u64 {
        *self.selection_key.0.get_or_init(|| {
            use sha2::{Digest, Sha256};
            let mut hasher = Sha256::new();
            hasher.update(self.name.as_bytes());
            hasher.update([0]);
            hasher.update(self.version.as_bytes());
            let digest = hasher.finalize();
            let mut first = [0u8; 8];
            first.copy_from_slice(&digest[..8]);
            u64::from_be_bytes(first)
        })
    }

    /// The resource as proto3 JSON of its `Any`, rendered by `render` the first time and
    /// shared afterwards.
    pub fn any_json(&self, render: impl FnOnce(&Resource) -> Option<String>) -> Option<&str> {
        self.any_json.0.get_or_init(|| render(self)).as_deref()
    }

    /// The same resource with a TTL (P25).
    pub fn with_ttl(mut self, ttl: Option<Duration>) -> Resource {
        self.ttl = ttl;
        self
    }

    /// The same resource, also known by these names (P24).
    pub fn with_aliases(mut self, mut aliases: Vec<String>) -> Resource {
        aliases.sort();
        aliases.dedup();
        self.aliases = aliases;
        self
    }

    /// The same resource, with its forms without secret material: `for_proxy` (the body
    /// without private key material) and `for_operator` (without any sensitive field), each
    /// only if it differs from the resource.
    pub fn with_redactions(
        mut self,
        for_proxy: Option<Vec<u8>>,
        for_operator: Option<Vec<u8>>,
    ) -> Resource {
        if for_proxy.is_none() && for_operator.is_none() {
            return self;
        }
        let kind = self.kind;
        self.redacted = Some(Box::new(Redacted {
            for_proxy: for_proxy.map(|body| Encoded::new(kind, body)),
            for_operator: for_operator.map(|body| Encoded::new(kind, body)),
        }));
        self
    }

    /// The `Any` bytes a proxy gets: without private key material unless `secrets` says
    /// serve.
    pub fn any_for(&self, secrets: Secrets) -> &Bytes {
        match (&self.redacted, secrets) {
            (Some(r), Secrets::Redact) => r.for_proxy.as_ref().map_or(&self.any, |e| &e.any),
            _ => &self.any,
        }
    }

    /// The message body a proxy gets (as [`Resource::any_for`]).
    pub fn body_for(&self, secrets: Secrets) -> &Bytes {
        match (&self.redacted, secrets) {
            (Some(r), Secrets::Redact) => r.for_proxy.as_ref().map_or(&self.body, |e| &e.body),
            _ => &self.body,
        }
    }

    /// The message body an operator sees: without any sensitive field unless `secrets` says
    /// show.
    pub fn body_shown(&self, secrets: Secrets) -> &Bytes {
        match (&self.redacted, secrets) {
            (Some(r), Secrets::Redact) => r.for_operator.as_ref().map_or(&self.body, |e| &e.body),
            _ => &self.body,
        }
    }

    /// Whether the resource carries private key material (which proxies get only when
    /// secrets are served).
    pub fn has_private_material(&self) -> bool {
        self.redacted
            .as_ref()
            .is_some_and(|r| r.for_proxy.is_some())
    }

    /// The same resource, naming these others (see [`Resource::references`]).
    pub fn with_references(mut self, mut references: Vec<Reference>) -> Resource {
        references.sort();
        references.dedup();
        self.references = references;
        self
    }

    /// The names of `kind` this resource refers to.
    pub fn refers_to(&self, kind: ResourceType) -> impl Iterator<Item = &str> {
        self.references
            .iter()
            .filter(move |(k, _)| *k == kind)
            .map(|(_, n)| n.as_str())
    }

    /// For a VHDS virtual host named `<route-config>/<vhost>`: the route configuration it
    /// belongs to (the namespace Envoy subscribes to). Names split at the last `/`, since a
    /// host never contains one.
    pub fn namespace(&self) -> Option<&str> {
        namespace_of(self.kind, &self.name)
    }
}

/// The namespace of a name of `kind` (see [`Resource::namespace`]): only VHDS has them.
pub fn namespace_of(kind: ResourceType, name: &str) -> Option<&str> {
    match kind {
        ResourceType::VirtualHost => name.rsplit_once('/').map(|(ns, _)| ns),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_urls_round_trip_and_match_message_names() {
        for t in ResourceType::ALL {
            assert_eq!(ResourceType::from_type_url(t.type_url()), Some(t));
            assert_eq!(
                t.type_url(),
                format!("{TYPE_URL_PREFIX}{}", t.message_name())
            );
            assert_eq!(ResourceType::ALL[t.index()], t);
            assert_eq!(t.facts().kind, t, "the table is in ALL order");
        }
        assert_eq!(
            ResourceType::from_type_url("type.googleapis.com/foo.Bar"),
            None
        );
    }

    #[test]
    fn any_wraps_the_body_and_body_is_a_view_of_it() {
        use prost::Message;
        for body in [vec![], vec![1, 2, 3], vec![7; 300]] {
            let r = Resource::new(ResourceType::Cluster, "c", "v", body.clone(), None);
            let any = Any::decode(r.any.clone()).expect("an Any");
            assert_eq!(any.type_url, ResourceType::Cluster.type_url());
            assert_eq!(any.value, body);
            assert_eq!(&r.body[..], &body[..]);
            // A view, not a copy.
            let (outer, inner) = (r.any.as_ptr() as usize, r.body.as_ptr() as usize);
            assert!(inner >= outer && inner + r.body.len() <= outer + r.any.len());
        }
    }

    #[test]
    fn p30_send_order_is_sds_cds_eds_leds_lds_rds_and_has_every_type_once() {
        let order: Vec<_> = ResourceType::SEND_ORDER
            .iter()
            .map(|t| t.short_name())
            .collect();
        // P34: a cluster's LEDS endpoints go with its ClusterLoadAssignment, before the
        // listeners that route to it.
        assert_eq!(
            &order[..8],
            ["SDS", "CDS", "EDS", "LEDS", "LDS", "RDS", "SRDS", "VHDS"]
        );
        let mut sorted = ResourceType::SEND_ORDER;
        sorted.sort();
        assert_eq!(sorted, ResourceType::ALL);
    }
}
