//! What Envoy (1.40) does with each resource type: how it subscribes, over which transports,
//! what a State of the World response means to it, and what it does with a name it no longer
//! gets; each fact with the line of Envoy's source that says so.
//!
//! Owns: one [`EnvoyFacts`] per type (a column of the type table, `resource::TypeFacts`), and
//! their rendering as the table of docs/protocol.md ("What Envoy does with each type"), which a
//! test holds to the document. The conformance matrix (`tests/conformance_e2e.rs`) is
//! generated from these facts and checks each against a real Envoy. Must not: decide what the
//! server sends (the protocol reads [`crate::resource::ResourceType::sotw_whole`], which agrees
//! with these facts and is tested to).

use std::fmt;

/// How Envoy asks for the resources of a type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subscribes {
    /// The wildcard: every resource the server has for it (P14).
    Wildcard,
    /// By the names its other resources or its bootstrap give.
    Named,
    /// By a namespace (a route configuration's name), and on demand by alias (P24).
    Namespace,
    /// By an xdstp glob collection (P34).
    Glob,
}

/// A way Envoy takes a type from a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum XdsTransport {
    /// A per-type State of the World stream (`api_type: GRPC`).
    Sotw,
    /// The aggregated State of the World stream (`ads: {}` with `ads_config.api_type: GRPC`).
    Ads,
    /// A per-type incremental stream (`api_type: DELTA_GRPC`).
    Delta,
    /// The aggregated incremental stream (`ads: {}` with `api_type: DELTA_GRPC`).
    DeltaAds,
    /// REST-JSON polling (`api_type: REST`).
    Rest,
}

impl XdsTransport {
    /// Every transport, in the order of the matrix's columns.
    pub const ALL: [XdsTransport; 5] = [
        XdsTransport::Sotw,
        XdsTransport::Ads,
        XdsTransport::Delta,
        XdsTransport::DeltaAds,
        XdsTransport::Rest,
    ];

    /// The column's name: `sotw`, `ads`, `delta`, `delta-ads`, `rest` (the modes of Envoy's
    /// sample bootstraps).
    pub fn name(self) -> &'static str {
        match self {
            XdsTransport::Sotw => "sotw",
            XdsTransport::Ads => "ads",
            XdsTransport::Delta => "delta",
            XdsTransport::DeltaAds => "delta-ads",
            XdsTransport::Rest => "rest",
        }
    }

    /// Whether responses are incremental (delta) rather than State of the World.
    pub fn is_delta(self) -> bool {
        matches!(self, XdsTransport::Delta | XdsTransport::DeltaAds)
    }
}

impl fmt::Display for XdsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a State of the World response is to Envoy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SotwMeaning {
    /// The whole set: what it leaves out is removed.
    WholeSet,
    /// Only the names in it: what it leaves out is kept.
    Partial,
}

/// What Envoy does with a name it holds and no longer gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// It removes the resource.
    Removed,
    /// It keeps the last version it took.
    Kept,
    /// It empties it (RTDS: the layer has no keys any more).
    Cleared,
    /// It falls back to the default configuration the resource's referrer gives (ECDS), or to
    /// none.
    Default,
}

impl Dropped {
    fn text(self) -> &'static str {
        match self {
            Dropped::Removed => "removed",
            Dropped::Kept => "kept",
            Dropped::Cleared => "cleared",
            Dropped::Default => "default config",
        }
    }
}

/// One type as Envoy 1.40 takes it.
#[derive(Debug)]
pub struct EnvoyFacts {
    pub subscribes: Subscribes,
    /// The configuration field that makes Envoy subscribe.
    pub field: &'static str,
    /// The transports Envoy takes the type over.
    pub transports: &'static [XdsTransport],
    /// What a State of the World response is to it; `None` where it has none.
    pub sotw: Option<SotwMeaning>,
    /// A State of the World response that leaves out a name it holds (it still asks for it).
    pub left_out: Option<Dropped>,
    /// An incremental response that lists a name it holds in `removed_resources`.
    pub removed: Dropped,
    /// Where Envoy's source says so: file, function and line, one per fact.
    pub source: &'static [&'static str],
}

use XdsTransport::{Ads, Delta, DeltaAds, Rest, Sotw};

const EVERY: &[XdsTransport] = &[Sotw, Ads, Delta, DeltaAds, Rest];
const DELTA_ONLY: &[XdsTransport] = &[Delta, DeltaAds];

/// How a named watch gets a SotW response: only with the names it watches, and not at all
/// when the response has none of them.
const NAMED_WATCH: &str = "source/common/config/grpc_mux_impl.cc `GrpcMuxImpl::onDiscoveryResponse`: a named watch gets only its own names, and only `if (!found_resources.empty())`";
/// How a wildcard watch gets a SotW response: every resource in it, as the whole set.
const WILDCARD_WATCH: &str = "source/common/config/grpc_mux_impl.cc `GrpcMuxImpl::onDiscoveryResponse`: `if (watch->resources_.empty()) { ... onConfigUpdate(all_resource_refs, ...)`";

pub(super) const CDS: EnvoyFacts = EnvoyFacts {
    subscribes: Subscribes::Wildcard,
    field: "dynamic_resources.cds_config",
    transports: EVERY,
    sotw: Some(SotwMeaning::WholeSet),
    left_out: Some(Dropped::Removed),
    removed: Dropped::Removed,
    source: &[
        "source/common/upstream/cds_api_impl.h `CdsApiImpl::initialize`: `subscription_->start({});`",
        WILDCARD_WATCH,
        "source/common/upstream/cds_api_impl.cc `CdsApiImpl::onConfigUpdate(resources, version_info)`: every cluster not in the response, `*to_remove_repeated.Add() = cluster_name;`",
    ],
};

pub(super) const EDS: EnvoyFacts = EnvoyFacts {
    subscribes: Subscribes::Named,
    field: "Cluster.eds_cluster_config.eds_config",
    transports: EVERY,
    sotw: Some(SotwMeaning::Partial),
    left_out: Some(Dropped::Kept),
    removed: Dropped::Kept,
    source: &[
        "source/extensions/clusters/eds/eds.cc `EdsClusterImpl::startPreInit`: `subscription_->start({edsServiceName()});`",
        NAMED_WATCH,
        "source/extensions/clusters/eds/eds.cc `EdsClusterImpl::onConfigUpdate(added_resources, removed_resources, ...)`: the removed names are not read, `return onConfigUpdate(added_resources, \"\");`",
    ],
};

pub(super) const LDS: EnvoyFacts = EnvoyFacts {
    subscribes: Subscribes::Wildcard,
    field: "dynamic_resources.lds_config",
    transports: EVERY,
    sotw: Some(SotwMeaning::WholeSet),
    left_out: Some(Dropped::Removed),
    removed: Dropped::Removed,
    source: &[
        "source/common/listener_manager/lds_api.cc `LdsApiImpl::LdsApiImpl`: `init_target_(\"LDS\", [this]() { subscription_->start({}); })`",
        WILDCARD_WATCH,
        "source/common/listener_manager/lds_api.cc `LdsApiImpl::onConfigUpdate(resources, version_info)`: every listener not in the response, `*to_remove_repeated.Add() = listener;`",
    ],
};

pub(super) const RDS: EnvoyFacts = EnvoyFacts {
    subscribes: Subscribes::Named,
    field: "HttpConnectionManager.rds.config_source",
    transports: EVERY,
    sotw: Some(SotwMeaning::Partial),
    left_out: Some(Dropped::Kept),
    removed: Dropped::Kept,
    source: &[
        "source/common/rds/rds_route_config_subscription.cc `RdsRouteConfigSubscription`: `subscription_->start({route_config_name_});`",
        NAMED_WATCH,
        "source/common/rds/rds_route_config_subscription.cc `RdsRouteConfigSubscription::onConfigUpdate(added_resources, removed_resources, ...)`: \"Server sent a delta {} update attempting to remove a resource (name: {}). Ignoring.\"",
    ],
};

pub(super) const SRDS: EnvoyFacts = EnvoyFacts {
    subscribes: Subscribes::Wildcard,
    field: "HttpConnectionManager.scoped_routes.scoped_rds.scoped_rds_config_source",
    transports: EVERY,
    sotw: Some(SotwMeaning::WholeSet),
    left_out: Some(Dropped::Removed),
    removed: Dropped::Removed,
    source: &[
        "source/common/router/scoped_rds.h `ScopedRdsConfigSubscription::start`: `subscription_->start({});`",
        WILDCARD_WATCH,
        "source/common/router/scoped_rds.cc `ScopedRdsConfigSubscription::onConfigUpdate(resources, version_info)`: every scope it holds is to be removed unless the response has it, `*to_remove_repeated.Add() = scoped_route.first;` (logged \"srds: queueing removal of scoped route\")",
    ],
};

pub(super) const VHDS: EnvoyFacts = EnvoyFacts {
    subscribes: Subscribes::Namespace,
    field: "RouteConfiguration.vhds.config_source",
    transports: DELTA_ONLY,
    sotw: None,
    left_out: None,
    removed: Dropped::Removed,
    source: &[
        "source/common/router/vhds.cc `VhdsSubscription::VhdsSubscription`: `options.use_namespace_matching_ = true;`, and on demand `subscription_->requestOnDemandUpdate({with_route_config_name_prefix});`",
        "source/common/router/vhds.cc `VhdsSubscription::VhdsSubscription`: any other config source is refused, \"vhds: only 'DELTA_GRPC' or 'ADS' (which uses Delta xDS) is supported as a config source.\", and State of the World ADS too, \"vhds: ADS must use DELTA_GRPC api_type when used as VHDS config source.\" (Envoy 1.40's words)",
        "source/common/router/vhds.cc `VhdsSubscription::onConfigUpdate`: `config_update_info_->onVhdsUpdate(added_vhosts, added_resource_ids, removed_resources, ...)` removes the virtual hosts named",
    ],
};

pub(super) const SDS: EnvoyFacts = EnvoyFacts {
    subscribes: Subscribes::Named,
    field: "SdsSecretConfig.sds_config (in a TLS context)",
    transports: EVERY,
    sotw: Some(SotwMeaning::Partial),
    left_out: Some(Dropped::Kept),
    removed: Dropped::Kept,
    source: &[
        "source/common/secret/sds_api.cc `SdsApi::initialize`: `subscription_->start({sds_config_name_});`",
        NAMED_WATCH,
        "source/common/secret/sds_api.cc `SdsApi::onConfigUpdate(added_resources, removed_resources, ...)`: \"Server sent a delta SDS update attempting to remove a resource (name: {}). Ignoring.\"",
    ],
};

pub(super) const RTDS: EnvoyFacts = EnvoyFacts {
    subscribes: Subscribes::Named,
    field: "layered_runtime.layers[].rtds_layer.rtds_config",
    transports: EVERY,
    sotw: Some(SotwMeaning::Partial),
    left_out: Some(Dropped::Kept),
    removed: Dropped::Cleared,
    source: &[
        "source/common/runtime/runtime_impl.cc `RtdsSubscription::start`: `subscription_->start({resource_name_});`",
        NAMED_WATCH,
        "source/common/runtime/runtime_impl.cc `RtdsSubscription::onConfigRemoved`: `proto_.Clear();`",
    ],
};

pub(super) const ECDS: EnvoyFacts = EnvoyFacts {
    subscribes: Subscribes::Named,
    field: "HttpFilter.config_discovery.config_source",
    transports: EVERY,
    sotw: Some(SotwMeaning::Partial),
    left_out: Some(Dropped::Kept),
    removed: Dropped::Default,
    source: &[
        "source/common/filter/config_discovery_impl.cc `FilterConfigSubscription::start`: `subscription_->start({filter_config_name_});`",
        NAMED_WATCH,
        "source/common/filter/config_discovery_impl.cc `FilterConfigSubscription::onConfigUpdate(added_resources, removed_resources, ...)`: `provider->onConfigRemoved(...)`, which applies the filter's default configuration",
    ],
};

pub(super) const LEDS: EnvoyFacts = EnvoyFacts {
    subscribes: Subscribes::Glob,
    field: "LocalityLbEndpoints.leds_cluster_locality_config.leds_config",
    transports: DELTA_ONLY,
    sotw: None,
    left_out: None,
    removed: Dropped::Removed,
    source: &[
        "source/extensions/clusters/eds/leds.cc `LedsSubscription::LedsSubscription`: `collectionSubscriptionFromUrl(leds_resource_locator, ...)`, then `subscription_->start({});`: a glob collection, which only Incremental xDS carries (api/envoy/config/endpoint/v3/endpoint_components.proto: \"SotW mode supports only list collections, and delta xDS supports both\"); a per-type State of the World or REST source is refused, \"Unknown xdstp:// transport API type\" (Envoy 1.40's words), and over State of the World ADS the collection is asked for and cannot be answered",
        "source/extensions/clusters/eds/leds.cc `LedsSubscription::onConfigUpdate`: the removed names leave the locality's endpoints",
    ],
};

impl EnvoyFacts {
    /// Whether Envoy takes the type over `transport`.
    pub fn supports(&self, transport: XdsTransport) -> bool {
        self.transports.contains(&transport)
    }

    /// What Envoy does with a name it holds and no longer gets, over `transport` (`None`
    /// where it does not take the type over it).
    pub fn dropped(&self, transport: XdsTransport) -> Option<Dropped> {
        if !self.supports(transport) {
            None
        } else if transport.is_delta() {
            Some(self.removed)
        } else {
            self.left_out
        }
    }
}

/// The table of docs/protocol.md ("What Envoy does with each type"), one row per type, from
/// the facts: what a test holds the document to.
pub fn table() -> String {
    let mut out = String::from(
        "| type | Envoy subscribes | by | transports | a SotW response is | left out of a SotW response | in `removed_resources` (delta) |\n|---|---|---|---|---|---|---|\n",
    );
    for kind in super::ResourceType::ALL {
        let f = kind.envoy();
        let subscribes = match f.subscribes {
            Subscribes::Wildcard => "wildcard",
            Subscribes::Named => "by name",
            Subscribes::Namespace => "by namespace and alias",
            Subscribes::Glob => "by glob collection",
        };
        let transports: Vec<&str> = f.transports.iter().map(|t| t.name()).collect();
        let sotw = match f.sotw {
            Some(SotwMeaning::WholeSet) => "the whole set",
            Some(SotwMeaning::Partial) => "partial",
            None => "— (none)",
        };
        let left_out = f.left_out.map_or("—", Dropped::text);
        out.push_str(&format!(
            "| {} | {subscribes} | `{}` | {} | {sotw} | {left_out} | {} |\n",
            kind.short_name(),
            f.field,
            transports.join(", "),
            f.removed.text()
        ));
    }
    out
}

/// The sources behind the table, a list per type: what docs/protocol.md cites.
pub fn sources() -> String {
    let mut out = String::new();
    for kind in super::ResourceType::ALL {
        out.push_str(&format!("- **{}**\n", kind.short_name()));
        for line in kind.envoy().source {
            out.push_str(&format!("  - {line}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::ResourceType;
    use super::*;

    /// The server's rule (P10, P14: a SotW response to a wildcard is the whole set, whatever
    /// the type) agrees with what Envoy does: every type Envoy asks for by wildcard takes a
    /// response as the whole set and drops what it leaves out, and every type it asks for by
    /// name takes it as partial (so the server may send only what changed).
    #[test]
    fn p10_p14_the_server_s_whole_set_rule_agrees_with_envoy_for_every_type() {
        for kind in ResourceType::ALL {
            let f = kind.envoy();
            match (f.subscribes, f.sotw) {
                (_, None) => assert!(
                    !f.supports(Sotw) && !f.supports(Ads) && !f.supports(Rest),
                    "{kind}: no SotW meaning, yet a SotW transport"
                ),
                (Subscribes::Wildcard, Some(meaning)) => {
                    assert_eq!(meaning, SotwMeaning::WholeSet, "{kind}");
                    assert!(kind.sotw_whole(true), "{kind}");
                    assert_eq!(f.left_out, Some(Dropped::Removed), "{kind}");
                }
                (_, Some(meaning)) => {
                    assert_eq!(meaning, SotwMeaning::Partial, "{kind}");
                    assert!(kind.sotw_whole(true), "{kind}: a wildcard is whole, always");
                    assert!(!kind.sotw_whole(false), "{kind}: Envoy names it; partial");
                    assert_ne!(f.left_out, Some(Dropped::Removed), "{kind}");
                }
            }
            assert!(!f.source.is_empty(), "{kind}: no source cited");
            assert!(f.supports(Delta) && f.supports(DeltaAds), "{kind}");
        }
    }
}
