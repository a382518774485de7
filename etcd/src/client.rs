//! The channel to etcd's members, the password's token on every call, and the clients of
//! the KV, watch and lease services over it.

use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

pub use tonic::transport::{Certificate, ClientTlsConfig as TlsOptions, Identity};

use crate::pb::etcdserverpb::{
    self as pb, auth_client::AuthClient, kv_client, lease_client::LeaseClient,
    maintenance_client::MaintenanceClient, watch_client,
};
use crate::request::{DeleteOptions, GetOptions, PutOptions, Txn, WatchOptions};
use crate::response::{
    CompactionResponse, DeleteResponse, GetResponse, LeaseGrantResponse, LeaseKeepAliveResponse,
    LeaseRevokeResponse, PutResponse, StatusResponse, TxnResponse, WatchResponse,
};
use crate::{Error, Result};

/// Every call goes through the token's interceptor.
type Service = InterceptedService<Channel, Token>;

/// The token etcd gave for the password, sent as the `token` header of every call.
#[derive(Clone, Default)]
struct Token(Arc<RwLock<Option<MetadataValue<Ascii>>>>);

impl Token {
    fn current(&self) -> Option<MetadataValue<Ascii>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
    fn set(&self, token: Option<MetadataValue<Ascii>>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = token;
    }
}

impl tonic::service::Interceptor for Token {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = self.current() {
            request.metadata_mut().insert("token", token);
        }
        Ok(request)
    }
}

/// How this client is let in: a user's password, traded for a token that expires.
#[derive(Clone)]
struct Access {
    token: Token,
    user: Option<(String, String)>,
    auth: AuthClient<Service>,
}

impl Access {
    /// Trade the password for a token (nothing without a user).
    async fn authenticate(&self) -> Result<()> {
        let Some((name, password)) = &self.user else {
            return Ok(());
        };
        // Asked without the expired token, which etcd would refuse.
        self.token.set(None);
        let answer = self
            .auth
            .clone()
            .authenticate(pb::AuthenticateRequest {
                name: name.clone(),
                password: password.clone(),
            })
            .await?
            .into_inner();
        let token = MetadataValue::try_from(answer.token.as_str()).map_err(|e| {
            Error::InvalidArgs(format!("etcd gave a token that is not a header: {e}"))
        })?;
        self.token.set(Some(token));
        Ok(())
    }

    /// `call` with `request`; when etcd says the token expired, once more with a new one
    /// (unless another call already got one).
    async fn call<Req, Resp, F, Fut>(&self, request: Req, call: F) -> Result<Resp>
    where
        Req: Clone,
        F: Fn(Req) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let sent_with = self.token.current();
        match call(request.clone()).await {
            Err(status) if self.user.is_some() && expired(&status) => {
                if self.token.current() == sent_with {
                    self.authenticate().await?;
                }
                Ok(call(request).await?.into_inner())
            }
            answer => Ok(answer?.into_inner()),
        }
    }
}

/// `$client.$method(request)` through `$access`: once more with a new token when etcd says
/// the token expired.
macro_rules! unary {
    ($access:expr, $client:expr, $method:ident, $request:expr) => {{
        let client = $client.clone();
        $access
            .call($request, |r| {
                let mut client = client.clone();
                async move { client.$method(r).await }
            })
            .await
    }};
}

/// etcd's words for a token it no longer takes.
fn expired(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Unauthenticated && status.message().contains("invalid auth token")
}

/// How to reach etcd.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    user: Option<(String, String)>,
    tls: Option<TlsOptions>,
    timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    keep_alive: Option<(Duration, Duration)>,
    keep_alive_while_idle: bool,
}

impl ConnectOptions {
    pub fn new() -> ConnectOptions {
        ConnectOptions::default()
    }
    /// As `name`, with `password`.
    pub fn with_user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }
    /// Over TLS (the endpoints are `https://`).
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }
    /// Each call's answer within `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Each connection within `timeout`.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }
    /// An HTTP/2 PING every `interval`, the connection closed when one is not answered
    /// within `timeout`.
    pub fn with_keep_alive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.keep_alive = Some((interval, timeout));
        self
    }
    /// Whether to ping with no call open too.
    pub fn with_keep_alive_while_idle(mut self, while_idle: bool) -> Self {
        self.keep_alive_while_idle = while_idle;
        self
    }

    fn endpoint(&self, url: &str) -> Result<Endpoint> {
        let mut endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| Error::InvalidArgs(format!("{url} is not an endpoint: {e}")))?;
        match (url.starts_with("https://"), &self.tls) {
            (true, tls) => endpoint = endpoint.tls_config(tls.clone().unwrap_or_default())?,
            (false, Some(_)) => {
                return Err(Error::InvalidArgs(format!(
                    "{url}: TLS is for https:// endpoints"
                )))
            }
            (false, None) => {}
        }
        if let Some((interval, timeout)) = self.keep_alive {
            endpoint = endpoint
                .http2_keep_alive_interval(interval)
                .keep_alive_timeout(timeout)
                .keep_alive_while_idle(self.keep_alive_while_idle);
        }
        if let Some(timeout) = self.timeout {
            endpoint = endpoint.timeout(timeout);
        }
        if let Some(timeout) = self.connect_timeout {
            endpoint = endpoint.connect_timeout(timeout);
        }
        Ok(endpoint)
    }
}

/// A client of etcd's members: one channel, balanced over them and connected lazily (the
/// first call finds whether they answer), and with a password, a token got at once.
#[derive(Clone)]
pub struct Client {
    kv: KvClient,
    watch: WatchClient,
    lease: LeaseClient<Service>,
    maintenance: MaintenanceClient<Service>,
    access: Access,
}

impl Client {
    pub async fn connect<E: AsRef<str>, S: AsRef<[E]>>(
        endpoints: S,
        options: Option<ConnectOptions>,
    ) -> Result<Client> {
        let options = options.unwrap_or_default();
        let endpoints = endpoints
            .as_ref()
            .iter()
            .map(|e| options.endpoint(e.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        if endpoints.is_empty() {
            return Err(Error::InvalidArgs("no etcd endpoint given".into()));
        }
        let token = Token::default();
        let channel =
            InterceptedService::new(Channel::balance_list(endpoints.into_iter()), token.clone());
        let access = Access {
            token,
            user: options.user.clone(),
            auth: AuthClient::new(channel.clone()),
        };
        access.authenticate().await?;
        Ok(Client {
            kv: KvClient {
                inner: kv_client::KvClient::new(channel.clone()),
                access: access.clone(),
            },
            watch: WatchClient {
                inner: watch_client::WatchClient::new(channel.clone()),
                access: access.clone(),
            },
            lease: LeaseClient::new(channel.clone()),
            maintenance: MaintenanceClient::new(channel),
            access,
        })
    }

    /// A KV client on this client's channel (its limits can be set apart).
    pub fn kv_client(&self) -> KvClient {
        self.kv.clone()
    }

    /// A watch client on this client's channel (its limits can be set apart).
    pub fn watch_client(&self) -> WatchClient {
        self.watch.clone()
    }

    pub async fn get(
        &mut self,
        key: impl Into<Vec<u8>>,
        options: Option<GetOptions>,
    ) -> Result<GetResponse> {
        self.kv.get(key, options).await
    }

    pub async fn put(
        &mut self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        options: Option<PutOptions>,
    ) -> Result<PutResponse> {
        self.kv.put(key, value, options).await
    }

    pub async fn delete(
        &mut self,
        key: impl Into<Vec<u8>>,
        options: Option<DeleteOptions>,
    ) -> Result<DeleteResponse> {
        self.kv.delete(key, options).await
    }

    pub async fn txn(&mut self, txn: Txn) -> Result<TxnResponse> {
        self.kv.txn(txn).await
    }

    /// Drop the history before `revision`: a watch from an older one is then refused.
    pub async fn compact(&mut self, revision: i64) -> Result<CompactionResponse> {
        let request = pb::CompactionRequest {
            revision,
            physical: false,
        };
        unary!(self.access, self.kv.inner, compact, request)
    }

    pub async fn watch(
        &mut self,
        key: impl Into<Vec<u8>>,
        options: Option<WatchOptions>,
    ) -> Result<WatchStream> {
        self.watch.watch(key, options).await
    }

    /// The status of the member the channel picked (its leader, its revision, ...).
    pub async fn status(&mut self) -> Result<StatusResponse> {
        unary!(self.access, self.maintenance, status, pb::StatusRequest {})
    }

    /// Add user `name` with `password` (for setting up an etcd that asks for users).
    pub async fn user_add(&mut self, name: &str, password: &str) -> Result<()> {
        let request = pb::AuthUserAddRequest {
            name: name.into(),
            password: password.into(),
            ..Default::default()
        };
        unary!(self.access, self.access.auth, user_add, request).map(drop)
    }

    /// Grant `role` to user `name`.
    pub async fn user_grant_role(&mut self, name: &str, role: &str) -> Result<()> {
        let request = pb::AuthUserGrantRoleRequest {
            user: name.into(),
            role: role.into(),
        };
        unary!(self.access, self.access.auth, user_grant_role, request).map(drop)
    }

    /// Turn on etcd's users: from now on, every call needs one (`root` must exist).
    pub async fn auth_enable(&mut self) -> Result<()> {
        unary!(
            self.access,
            self.access.auth,
            auth_enable,
            pb::AuthEnableRequest {}
        )
        .map(drop)
    }

    /// A lease of `ttl` seconds.
    pub async fn lease_grant(&mut self, ttl: i64) -> Result<LeaseGrantResponse> {
        let request = pb::LeaseGrantRequest { ttl, id: 0 };
        unary!(self.access, self.lease, lease_grant, request)
    }

    /// End lease `id` now, and with it every key attached to it.
    pub async fn lease_revoke(&mut self, id: i64) -> Result<LeaseRevokeResponse> {
        unary!(
            self.access,
            self.lease,
            lease_revoke,
            pb::LeaseRevokeRequest { id }
        )
    }

    /// Renewals of lease `id`: one is sent at once, then one per
    /// [`LeaseKeeper::keep_alive`]; each answer comes on the stream.
    pub async fn lease_keep_alive(
        &mut self,
        id: i64,
    ) -> Result<(LeaseKeeper, LeaseKeepAliveStream)> {
        let lease = self.lease.clone();
        self.access
            .call(id, |id| {
                let mut lease = lease.clone();
                async move {
                    let (sender, requests) = mpsc::channel(4);
                    let _ = sender.send(pb::LeaseKeepAliveRequest { id }).await;
                    let answer = lease
                        .lease_keep_alive(ReceiverStream::new(requests))
                        .await?;
                    Ok(answer.map(|stream| {
                        (LeaseKeeper { id, sender }, LeaseKeepAliveStream { stream })
                    }))
                }
            })
            .await
    }
}

/// The KV service's calls.
#[derive(Clone)]
pub struct KvClient {
    inner: kv_client::KvClient<Service>,
    access: Access,
}

impl KvClient {
    /// Answers up to `limit` bytes (gRPC's default is 4 MiB).
    pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
        self.inner = self.inner.max_decoding_message_size(limit);
        self
    }

    pub async fn get(
        &mut self,
        key: impl Into<Vec<u8>>,
        options: Option<GetOptions>,
    ) -> Result<GetResponse> {
        let request = options.unwrap_or_default().request(key.into());
        unary!(self.access, self.inner, range, request)
    }

    pub async fn put(
        &mut self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        options: Option<PutOptions>,
    ) -> Result<PutResponse> {
        let request = options
            .unwrap_or_default()
            .request(key.into(), value.into());
        unary!(self.access, self.inner, put, request)
    }

    pub async fn delete(
        &mut self,
        key: impl Into<Vec<u8>>,
        options: Option<DeleteOptions>,
    ) -> Result<DeleteResponse> {
        let request = options.unwrap_or_default().request(key.into());
        unary!(self.access, self.inner, delete_range, request)
    }

    pub async fn txn(&mut self, txn: Txn) -> Result<TxnResponse> {
        unary!(self.access, self.inner, txn, txn.request())
    }
}

/// The watch service's calls.
#[derive(Clone)]
pub struct WatchClient {
    inner: watch_client::WatchClient<Service>,
    access: Access,
}

impl WatchClient {
    /// Answers up to `limit` bytes (gRPC's default is 4 MiB).
    pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
        self.inner = self.inner.max_decoding_message_size(limit);
        self
    }

    /// A watch of the key (or prefix) as `options` say, on a stream of its own; its first
    /// answer says it was created.
    pub async fn watch(
        &mut self,
        key: impl Into<Vec<u8>>,
        options: Option<WatchOptions>,
    ) -> Result<WatchStream> {
        let inner = self.inner.clone();
        let create = options.unwrap_or_default().request(key.into());
        self.access
            .call(create, |create| {
                let mut inner = inner.clone();
                async move {
                    let (requests, receiver) = mpsc::channel(4);
                    let _ = requests.send(create).await;
                    let answer = inner.watch(ReceiverStream::new(receiver)).await?;
                    Ok(answer.map(|stream| WatchStream {
                        _requests: requests,
                        stream,
                    }))
                }
            })
            .await
    }
}

/// A watch's answers. Its request stream stays open while it lives (etcd ends a watch whose
/// client closes it).
pub struct WatchStream {
    _requests: mpsc::Sender<pb::WatchRequest>,
    stream: tonic::Streaming<WatchResponse>,
}

impl WatchStream {
    /// The next answer; `None` when etcd ended the stream.
    pub async fn message(&mut self) -> Result<Option<WatchResponse>> {
        Ok(self.stream.message().await?)
    }
}

/// Sends a lease's renewals.
pub struct LeaseKeeper {
    id: i64,
    sender: mpsc::Sender<pb::LeaseKeepAliveRequest>,
}

impl LeaseKeeper {
    /// Ask for one renewal (its answer comes on the [`LeaseKeepAliveStream`]).
    pub async fn keep_alive(&mut self) -> Result<()> {
        self.sender
            .send(pb::LeaseKeepAliveRequest { id: self.id })
            .await
            .map_err(|e| Error::LeaseKeepAliveError(e.to_string()))
    }
}

/// A lease's renewals' answers.
pub struct LeaseKeepAliveStream {
    stream: tonic::Streaming<LeaseKeepAliveResponse>,
}

impl LeaseKeepAliveStream {
    /// The next answer; `None` when etcd ended the stream.
    pub async fn message(&mut self) -> Result<Option<LeaseKeepAliveResponse>> {
        Ok(self.stream.message().await?)
    }
}
