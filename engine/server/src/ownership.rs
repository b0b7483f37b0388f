//! Conversations owned by partitions (`colloquy_cluster`), in the server: when several
//! engine nodes share a store with a lease table, each conversation is served by the node
//! holding its partition's lease, and any node takes any request.
//!
//! - **Ticks**: a task runs [`colloquy_cluster::tick`] every `tick_ms` against the lease
//!   store (heartbeat, take a fair share, renew, give back excess) and drops this engine's
//!   cached conversations of the partitions it no longer holds.
//! - **Routing** ([`route_to_owner`], a middleware over the conversation routes): a request
//!   for a conversation this node owns, by a locally valid lease, is served here; one for a
//!   conversation another node owns is forwarded there over internal HTTP, with the
//!   caller's own credentials (the owner checks them again) and the node secret; while a
//!   partition changes hands the request waits a little and routes again, then answers 503
//!   with `Retry-After` (after two ticks while the lease store does not answer: nothing can
//!   change hands then). A forwarded request is never forwarded again: a node that cannot serve it
//!   says so at once ([`MOVED`]) and the node the client called routes it again.
//! - A start without a `conversation_id` gets one here, drawn until it falls in a partition
//!   this node owns, so starts are served where they arrive.
//! - **A2A calls** name their task (a conversation) inside the call: [`a2a_route`] reads it
//!   from the JSON-RPC params or the REST path and routes the call as any other. A call
//!   that opens a task is served here when this node owns a partition (the handler draws
//!   the task's id in one), unless its id is derived from the call (a Colloquy bridge's
//!   retry-safe send), which routes by that id. Calls about no task (`ListTasks`) are
//!   served here, from the store.
//! - **The A2A bridge's answers** ([`OwnerReplies`]): the node leading delivery to a remote
//!   A2A agent sends each answer to the conversation's owner, as a request acting as that
//!   agent ([`ACT_AS`], honoured only beside the node secret, and only for remote A2A agents).
//!
//! - **Fencing**: every commit carries the lease this node holds its partition by
//!   (`Ownership` is the engine's `Fencer`), and a store with a lease table (Postgres)
//!   refuses it in the commit's own transaction once another node took the partition; the
//!   engine then drops its copy, this node stops serving the partition, and the request is
//!   routed again (it was not applied): to the new owner, or 503 `moved` after the wait.
//! - **Deadlines** fire on the owner: the scheduler claims due wake-ups of the partitions
//!   this node holds only (`Fencer::owned`).
//!
//! `colloquy serve --store postgres://… --cluster-secret-file FILE` turns it on; see
//! docs/scale.md.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use colloquy_cluster::{
    Fence, LeaseStore, LocalLeases, NodeId, OwnershipConfig, Route, partition_of,
};
use colloquy_core::engine::Engine;
use tokio::task::JoinHandle;

use super::AppState;
use super::error::ApiError;

/// The header a forwarded request carries: the node that forwarded it.
pub const FORWARDED_BY: &str = "x-colloquy-forwarded-by";
/// The header carrying the node secret on a forwarded request.
pub const NODE_SECRET: &str = "x-colloquy-node-secret";
/// The header naming the node that served a conversation's request.
pub const SERVED_BY: &str = "x-colloquy-node";
/// The header on a 503 whose request was **not applied** because the node answering does
/// not own the conversation (any more): a commit refused by fencing, or a forwarded
/// request reaching a node that no longer holds the partition. The node that routed the
/// request takes it as "route again", not as the answer.
pub const MOVED: &str = "x-colloquy-moved";
/// The header by which a node's forwarded request acts as a remote A2A agent (the bridge's
/// answers, [`OwnerReplies`]). Honoured only on a request carrying the node secret, and
/// never copied from a client's request into a forward.
pub const ACT_AS: &str = "x-colloquy-act-as";
/// How long a request waits for a partition changing hands before it is answered 503.
pub const HANDOVER_WAIT: Duration = Duration::from_secs(2);
/// Most ids a start draws to find one in a partition this node owns.
const MAX_ID_DRAWS: usize = 4096;

/// How a node takes part in ownership.
#[derive(Clone)]
pub struct OwnershipSettings {
    /// The shared lease table.
    pub leases: Arc<dyn LeaseStore>,
    /// This node's id, unique in the deployment.
    pub node: NodeId,
    /// The URL other nodes forward to (`http://host:port`); `None`: the listening address.
    pub address: Option<String>,
    /// The secret every node of the deployment shares, which marks a request as forwarded.
    pub secret: Arc<str>,
    /// TTL, tick, partitions (the same on every node).
    pub config: OwnershipConfig,
}

impl std::fmt::Debug for OwnershipSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnershipSettings")
            .field("node", &self.node)
            .field("address", &self.address)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A node's part in ownership while it runs.
pub struct Ownership {
    leases: Arc<dyn LeaseStore>,
    secret: Arc<str>,
    node: NodeId,
    /// The node's leases as of its last tick (requests route on this snapshot).
    local: RwLock<Arc<LocalLeases>>,
    /// The node's monotonic clock starts here.
    started: Instant,
    client: reqwest::Client,
    /// How long a forward waits for the owner's answer to begin (the lease TTL): an owner
    /// that stalls (paused, overloaded) has lost its partitions by then anyway.
    forward_timeout: Duration,
    /// Whether the last tick reached the lease store. While it does not, a request for a
    /// partition nobody holds waits only [`Ownership::unreachable_wait`]: no lease can
    /// change hands meanwhile.
    store_reachable: std::sync::atomic::AtomicBool,
    /// Two ticks, at most a second: long enough for a tick to find the store back and take
    /// the partitions, short enough that a client hears of an outage within a second.
    unreachable_wait: Duration,
    /// Counts the changes of the set of partitions this node holds: what runs per owned
    /// conversation (push notification followers) subscribes, to move with them.
    held_changes: tokio::sync::watch::Sender<u64>,
}

tokio::task_local! {
    /// While a request is served here: whether a commit of it was refused by fencing, noted
    /// by a handler that answers errors in a shape of its own ([`note_fenced`]).
    static FENCED_HERE: std::cell::Cell<bool>;
}

/// Notes that a commit of the request being served here was refused by fencing, for a
/// handler that answers every error in its own shape (A2A's JSON-RPC answers with status
/// 200): the router then answers [`MOVED`] in its place, and the request, which was not
/// applied, is routed again to the new owner. Nothing outside a routed request.
pub fn note_fenced() {
    let _ = FENCED_HERE.try_with(|fenced| fenced.set(true));
}

/// Runs `serve` (the request for conversation `id`, served here), answering [`MOVED`]
/// instead of its answer when it noted a commit refused by fencing ([`note_fenced`]).
pub(crate) async fn unless_fenced(
    id: &str,
    serve: impl std::future::Future<Output = Response>,
) -> Response {
    FENCED_HERE
        .scope(std::cell::Cell::new(false), async move {
            let response = serve.await;
            if FENCED_HERE.with(std::cell::Cell::get) {
                moved(id, "fenced")
            } else {
                response
            }
        })
        .await
}

/// Request extension: the remote A2A agent a request acts as. Set only by this module: by
/// [`OwnerReplies`], and by [`route_to_owner`] on a forwarded request (node secret checked)
/// that names one in [`ACT_AS`]. The `Caller` extractor takes it as the caller.
#[derive(Clone, Debug)]
pub struct ActingAs(pub colloquy_protocol::message::AgentId);

impl std::fmt::Debug for Ownership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ownership")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Ownership {
    /// The ownership of a node listening at `listening` (`http://…`).
    pub fn new(settings: OwnershipSettings, listening: &str) -> Ownership {
        let address = settings.address.unwrap_or_else(|| listening.to_owned());
        let forward_timeout = Duration::from_millis(settings.config.lease_ttl_ms.max(1));
        let tick_ms = settings.config.tick_ms.max(1);
        let local = LocalLeases::new(settings.node.clone(), address, settings.config);
        Ownership {
            leases: settings.leases,
            secret: settings.secret,
            node: settings.node,
            local: RwLock::new(Arc::new(local)),
            started: Instant::now(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
            forward_timeout,
            store_reachable: std::sync::atomic::AtomicBool::new(true),
            unreachable_wait: Duration::from_millis(2 * tick_ms).min(HANDOVER_WAIT / 2),
            held_changes: tokio::sync::watch::Sender::new(0),
        }
    }

    /// This node's id.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// The node's monotonic clock, in milliseconds.
    fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn snapshot(&self) -> Arc<LocalLeases> {
        self.local
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Where a request for conversation `id` goes now.
    pub fn route(&self, id: &str) -> Route {
        self.snapshot().route(id, self.now())
    }

    /// Whether this node serves conversation `id` now (it holds its partition by a locally
    /// valid lease).
    pub fn owns(&self, id: &str) -> bool {
        colloquy_core::engine::Fencer::holds(self, id)
    }

    /// How much longer this node holds conversation `id`'s partition by its local lease, if
    /// it holds it now. A tick that renews the lease lengthens it; a tick that cannot reach
    /// the store does not, and the lease lapses here when this runs out (no tick says so).
    fn held_for(&self, id: &str) -> Option<Duration> {
        let local = self.snapshot();
        let partition = partition_of(id, local.config().partitions);
        let now = self.now();
        (local.valid(partition, now)).map(|held| Duration::from_millis(held.valid_until - now))
    }

    /// Returns once this node no longer owns conversation `id` (at once if it does not now):
    /// a tick or a fenced commit saw its partition move, or this node's lease on it lapsed
    /// with no tick to renew it (the store out of reach; that changes no held set, so the
    /// wait also wakes when the lease runs out).
    pub async fn until_moved(&self, id: &str) {
        // Subscribed before the first look: a move in between still wakes it.
        let mut moved = self.held_changes();
        while let Some(left) = self.held_for(id) {
            tokio::select! {
                changed = moved.changed() => if changed.is_err() {
                    return;
                },
                () = tokio::time::sleep(left) => {}
            }
        }
    }

    /// Wakes up each time the set of partitions this node holds changes.
    pub fn held_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.held_changes.subscribe()
    }

    /// A fresh conversation id in a partition this node owns now, if it owns any.
    pub fn own_id(&self) -> Option<String> {
        self.own_id_drawn(|| colloquy_core::engine::new_id().to_string())
    }

    /// [`Ownership::own_id`], else (this node owns nothing yet) any fresh id: what opens a
    /// conversation is then served by that id's owner.
    fn own_or_any_id(&self) -> String {
        self.own_id()
            .unwrap_or_else(|| colloquy_core::engine::new_id().to_string())
    }

    /// An id `draw` makes (fresh ones, from a large space), drawn until it falls in a
    /// partition this node owns now; `None` when it owns none.
    pub fn own_id_drawn(&self, mut draw: impl FnMut() -> String) -> Option<String> {
        let local = self.snapshot();
        let now = self.now();
        let owns =
            |partition: colloquy_cluster::PartitionId| local.valid_epoch(partition, now).is_some();
        if !local.held().keys().any(|partition| owns(*partition)) {
            return None;
        }
        let partitions = local.config().partitions;
        (0..MAX_ID_DRAWS)
            .map(|_| draw())
            .find(|id| owns(partition_of(id, partitions)))
    }

    /// The partitions this node holds by a locally valid lease now.
    fn held_now(&self) -> Vec<colloquy_cluster::PartitionId> {
        let local = self.snapshot();
        let now = self.now();
        (local.held().keys())
            .filter(|partition| local.valid_epoch(**partition, now).is_some())
            .copied()
            .collect()
    }

    /// One tick: leases taken, renewed and given back; the engine's cache of the
    /// partitions this node no longer holds dropped.
    pub async fn tick(&self, engine: &Engine) {
        let before = self.snapshot();
        let mut local = (*before).clone();
        let outcome = colloquy_cluster::tick(&*self.leases, &mut local, || self.now()).await;
        let partitions = local.config().partitions;
        let moved = !before.held().keys().eq(local.held().keys());
        *self
            .local
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(local);
        self.store_reachable.store(
            outcome.error.is_none(),
            std::sync::atomic::Ordering::Relaxed,
        );
        if let Some(error) = outcome.error {
            tracing::warn!(%error, "an ownership tick stopped early");
        }
        if !outcome.dropped.is_empty() {
            let dropped: std::collections::HashSet<_> = outcome.dropped.into_iter().collect();
            engine.evict(|id| dropped.contains(&partition_of(id, partitions)));
        }
        if moved {
            self.held_changes.send_modify(|changes| *changes += 1);
        }
    }

    /// Runs [`Ownership::tick`] every `tick_ms` until aborted.
    pub fn spawn_ticks(self: &Arc<Self>, engine: Arc<Engine>) -> JoinHandle<()> {
        let ownership = self.clone();
        let period = Duration::from_millis(self.snapshot().config().tick_ms.max(1));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                ownership.tick(&engine).await;
            }
        })
    }

    /// Gives every lease back and leaves the membership (a clean shutdown), so the others
    /// take over at once instead of after the TTL.
    pub async fn leave(&self) {
        let mut local = (*self.snapshot()).clone();
        if let Err(error) = colloquy_cluster::leave(&*self.leases, &mut local, || self.now()).await
        {
            // The others take over after the TTL instead.
            tracing::warn!(%error, "leaving the ownership table failed");
        }
    }

    /// Whether `headers` mark a request forwarded by a node of this deployment.
    fn forwarded(&self, headers: &HeaderMap) -> bool {
        headers.contains_key(FORWARDED_BY)
            && headers
                .get(NODE_SECRET)
                .is_some_and(|secret| same_secret(secret.as_bytes(), self.secret.as_bytes()))
    }
}

impl colloquy_core::engine::Fencer for Ownership {
    /// The lease this node holds the conversation's partition by; epoch 0 (which no lease
    /// has, so the store refuses the commit) when it does not hold it now.
    fn fence(&self, conversation_id: &str) -> Fence {
        let local = self.snapshot();
        let partition = partition_of(conversation_id, local.config().partitions);
        Fence {
            partition,
            node: self.node.clone(),
            epoch: local.valid_epoch(partition, self.now()).unwrap_or_default(),
        }
    }

    fn owned(&self) -> Vec<colloquy_cluster::PartitionId> {
        self.held_now()
    }

    fn holds(&self, conversation_id: &str) -> bool {
        self.held_for(conversation_id).is_some()
    }

    fn lost(&self, fenced: &colloquy_cluster::Fenced) {
        let mut local = self
            .local
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if local.valid_epoch(fenced.partition, self.now()).is_some() {
            // A tick running now may put its own copy back; its view then shows the
            // partition's new owner, which drops it again.
            Arc::make_mut(&mut local).fenced(fenced.partition, fenced.epoch);
            drop(local);
            self.held_changes.send_modify(|changes| *changes += 1);
        }
    }
}

/// Compares two secrets in time that does not depend on where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The conversation a request is about, from its path (`/v1/conversations/{id}…`).
fn conversation_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v1/conversations/")?;
    let id = rest.split('/').next()?;
    (!id.is_empty()).then_some(id)
}

/// What [`route_to_owner`] routes: requests about one conversation.
enum Routed {
    /// `/v1/conversations/{id}…`.
    Conversation(String),
    /// `POST /v1/conversations`.
    Start,
    /// An A2A call ([`a2a_route`] reads which task).
    A2a,
}

impl Routed {
    fn of(method: &Method, path: &str) -> Option<Routed> {
        if let Some(id) = conversation_of(path) {
            Some(Routed::Conversation(id.to_owned()))
        } else if method == Method::POST && path == "/v1/conversations" {
            Some(Routed::Start)
        } else if a2a_call(method, path) {
            Some(Routed::A2a)
        } else {
            None
        }
    }
}

/// Middleware: serves a conversation's requests on its owner (see the module docs).
///
/// The node a client called keeps the request until it has an answer: it serves it when it
/// owns the conversation, forwards it when another node does, and routes it again (every
/// 25 ms, for at most [`HANDOVER_WAIT`]) while nobody does, or when the answer says the
/// request was not applied there ([`MOVED`]: fenced, or the owner gave the partition away
/// meanwhile). A node that gets a forwarded request it cannot serve at once says so at
/// once instead of waiting: the waiting is the caller's node's, so that two nodes never
/// wait on each other.
pub async fn route_to_owner(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(ownership) = state.ownership().cloned() else {
        return next.run(request).await;
    };
    let Some(routed) = Routed::of(request.method(), request.uri().path()) else {
        return next.run(request).await;
    };
    let forwarded = ownership.forwarded(request.headers());
    // Kept whole so that it can be served or forwarded again after a `MOVED` answer.
    let (mut parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, crate::extract::MAX_BODY_BYTES).await else {
        return ApiError::TooLarge(crate::extract::MAX_BODY_BYTES).into_response();
    };
    if forwarded {
        match acting_as(&state, &parts.headers) {
            Ok(Some(agent)) => {
                parts.extensions.insert(ActingAs(agent));
            }
            Ok(None) => {}
            Err(refused) => return refused.into_response(),
        }
    }
    let (body, id) = match routed {
        Routed::Conversation(id) => (body, id),
        Routed::Start => with_conversation_id(&ownership, &mut parts, body),
        Routed::A2a => match a2a_route(&state, &mut parts, &body).await {
            A2aRoute::Here => {
                return next.run(Request::from_parts(parts, Body::from(body))).await;
            }
            A2aRoute::Task(id) => (body, id),
            // Served here when this node owns a partition; else by the owner of any id. (A
            // derived id came back as `Task`.)
            A2aRoute::New | A2aRoute::Derived { .. } => (body, ownership.own_or_any_id()),
        },
    };
    let served = &id;
    on_owner(&ownership, &id, forwarded, parts, body, |request| {
        unless_fenced(served, next.clone().run(request))
    })
    .await
}

/// Serves `parts` and `body`, a request about conversation `id`, on its owner: `serve`
/// answers it here when this node owns `id`; another node's is forwarded there. See
/// [`route_to_owner`] for the waits; `forwarded`: the request came from another node,
/// which does the waiting.
async fn on_owner<Serve, Served>(
    ownership: &Ownership,
    id: &str,
    forwarded: bool,
    parts: axum::http::request::Parts,
    body: axum::body::Bytes,
    mut serve: Serve,
) -> Response
where
    Serve: FnMut(Request) -> Served,
    Served: std::future::Future<Output = Response>,
{
    let arrived = Instant::now();
    let deadline = arrived + HANDOVER_WAIT;
    loop {
        let answer = match ownership.route(id) {
            Route::Serve { .. } => {
                let request = Request::from_parts(parts.clone(), Body::from(body.clone()));
                let mut response = serve(request).await;
                if let Ok(node) = HeaderValue::from_str(ownership.node().as_str()) {
                    response.headers_mut().insert(SERVED_BY, node);
                }
                Some(response)
            }
            Route::Forward(address) if !forwarded => {
                forward(ownership, &address, parts.clone(), body.clone()).await
            }
            Route::Forward(_) | Route::Unavailable { .. } if forwarded => {
                return not_here(id);
            }
            Route::Forward(_) | Route::Unavailable { .. } => None,
        };
        match answer {
            Some(response) if forwarded || !response.headers().contains_key(MOVED) => {
                return response;
            }
            // Nobody here holds it, and this node cannot see the lease table: waiting past a
            // tick or two (which would find the store back) would not tell it who takes the
            // partition.
            _ if !ownership
                .store_reachable
                .load(std::sync::atomic::Ordering::Relaxed)
                && arrived.elapsed() >= ownership.unreachable_wait =>
            {
                return store_unreachable();
            }
            Some(response) if Instant::now() >= deadline => return response,
            _ if Instant::now() >= deadline => return unavailable(id),
            _ => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }
}

/// The remote A2A agent a forwarded request acts as ([`ACT_AS`]), if it names one; 403
/// when it names an agent that is not a remote A2A agent here (only the bridge acts as
/// anyone, and only as the agents it speaks for).
fn acting_as(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<colloquy_protocol::message::AgentId>, ApiError> {
    let Some(named) = headers.get(ACT_AS) else {
        return Ok(None);
    };
    let agent = named.to_str().unwrap_or_default();
    if state.identity().is_a2a(agent) {
        Ok(Some(colloquy_protocol::message::AgentId::from(agent)))
    } else {
        Err(ApiError::Forbidden(format!(
            "`{ACT_AS}` names `{}`, which is not a remote A2A agent of this deployment",
            colloquy_core::log_safe::LogSafe(agent)
        )))
    }
}

/// A start's body with its `conversation_id`: the one the client chose, else one drawn in
/// a partition this node owns (so the start is served here), written into the body.
fn with_conversation_id(
    ownership: &Ownership,
    parts: &mut axum::http::request::Parts,
    body: axum::body::Bytes,
) -> (axum::body::Bytes, String) {
    /// The one field routing needs; the route's own extractor reads the rest.
    #[derive(serde::Deserialize)]
    struct Named<'a> {
        #[serde(borrow, default)]
        conversation_id: Option<std::borrow::Cow<'a, str>>,
    }
    match serde_json::from_slice::<Named<'_>>(&body) {
        Ok(Named {
            conversation_id: Some(id),
        }) => {
            let id = id.into_owned();
            (body, id)
        }
        Ok(Named {
            conversation_id: None,
        }) => {
            let id = ownership.own_or_any_id();
            match with_id(&body, &id) {
                Some(named) => {
                    parts.headers.remove(header::CONTENT_LENGTH);
                    (named, id)
                }
                None => (body, id),
            }
        }
        // Not a JSON object: the route's own extractor says what is wrong, here.
        Err(_) => (body, ownership.own_id().unwrap_or_default()),
    }
}

/// `body` (a JSON object without a `conversation_id`) with `"conversation_id": id` put
/// first, without parsing the rest again. `None` if it does not start as an object.
fn with_id(body: &[u8], id: &str) -> Option<axum::body::Bytes> {
    let open = body.iter().position(|byte| !byte.is_ascii_whitespace())?;
    if body[open] != b'{' {
        return None;
    }
    let rest = &body[open + 1..];
    let empty = rest.iter().find(|byte| !byte.is_ascii_whitespace()) == Some(&b'}');
    let value = serde_json::to_string(id).ok()?;
    let mut named = Vec::with_capacity(body.len() + value.len() + 20);
    named.extend_from_slice(b"{\"conversation_id\":");
    named.extend_from_slice(value.as_bytes());
    if !empty {
        named.push(b',');
    }
    named.extend_from_slice(rest);
    Some(named.into())
}

/// Whether a request is an A2A call (its JSON-RPC and REST routes; agent cards are not
/// calls).
fn a2a_call(method: &Method, path: &str) -> bool {
    path.starts_with("/a2a/") && !(method == Method::GET && path.contains("/.well-known/"))
}

/// Where an A2A call is served ([`a2a_route`]).
#[derive(Debug, PartialEq, Eq)]
enum A2aRoute {
    /// About no one task (`ListTasks`, the extended card), or not readable as a call (the
    /// handler says what is wrong): served here.
    Here,
    /// About this task (a conversation id): served by its owner.
    Task(String),
    /// Opens a task with a fresh id: served by any node owning a partition (the handler
    /// draws the id in one of this node's).
    New,
    /// Opens a task whose id is derived from the caller, the agent and the message id (a
    /// Colloquy bridge's send, retry-safe: `inward::derived_task_id`).
    Derived { agent: String, message_id: String },
}

/// The few fields of an A2A call that say which task it is about (the handler reads the
/// rest). v1.0's proto names (`task_id`) are read as the JSON ones.
mod a2a_fields {
    use serde::Deserialize;

    #[derive(Deserialize)]
    pub struct Call {
        #[serde(default)]
        pub method: String,
        #[serde(default)]
        pub params: Params,
    }

    #[derive(Default, Deserialize)]
    pub struct Params {
        /// The task (`tasks/get`, `GetTask`, …); a push config's id in the push config calls.
        #[serde(default)]
        pub id: Option<serde_json::Value>,
        /// The task of a push config call.
        #[serde(default, rename = "taskId", alias = "task_id")]
        pub task_id: Option<String>,
        /// The message of a send.
        #[serde(default)]
        pub message: Option<Message>,
    }

    #[derive(Deserialize)]
    pub struct Message {
        #[serde(default, rename = "messageId", alias = "message_id")]
        pub message_id: Option<String>,
        #[serde(default, rename = "taskId", alias = "task_id")]
        pub task_id: Option<String>,
        #[serde(default)]
        pub metadata: Option<serde_json::Value>,
    }
}

/// Which task an A2A call (`path` under `/a2a/`, `body`) is about: from the path of the
/// REST binding, from the params of a JSON-RPC call. A send into no task opens one.
fn a2a_target(path: &str, body: &[u8]) -> A2aRoute {
    let Some((agent, call)) = path
        .strip_prefix("/a2a/")
        .map(|rest| rest.split_once('/').unwrap_or((rest, "")))
    else {
        return A2aRoute::Here;
    };
    let named = |task: &str| {
        if task.is_empty() {
            A2aRoute::Here
        } else {
            A2aRoute::Task(task.to_owned())
        }
    };
    let message = match call {
        "" => {
            let Ok(call) = serde_json::from_slice::<a2a_fields::Call>(body) else {
                return A2aRoute::Here;
            };
            match call.method.as_str() {
                "message/send" | "message/stream" | "SendMessage" | "SendStreamingMessage" => {
                    call.params.message
                }
                "tasks/get" | "tasks/cancel" | "tasks/resubscribe" | "GetTask" | "CancelTask"
                | "SubscribeToTask" => {
                    let id = call.params.id.as_ref().and_then(serde_json::Value::as_str);
                    return named(id.unwrap_or_default());
                }
                method if method.contains("PushNotificationConfig") => {
                    return named(call.params.task_id.as_deref().unwrap_or_default());
                }
                _ => return A2aRoute::Here,
            }
        }
        "rest/message:send" | "rest/message:stream" => {
            match serde_json::from_slice::<a2a_fields::Params>(body) {
                Ok(params) => params.message,
                Err(_) => return A2aRoute::Here,
            }
        }
        call => {
            let Some(task) = call.strip_prefix("rest/tasks/") else {
                return A2aRoute::Here;
            };
            let task = task.split('/').next().unwrap_or_default();
            return named(crate::a2a::rest::task_and_verb(task).0);
        }
    };
    let Some(message) = message else {
        return A2aRoute::Here;
    };
    if let Some(task) = message.task_id {
        return named(&task);
    }
    let retry_safe = (message.metadata.as_ref())
        .and_then(|metadata| metadata.pointer("/colloquy/conversation"))
        .is_some_and(serde_json::Value::is_string);
    match message.message_id {
        _ if !retry_safe => A2aRoute::New,
        Some(message_id) => A2aRoute::Derived {
            agent: agent.to_owned(),
            message_id,
        },
        None => A2aRoute::Here,
    }
}

/// [`a2a_target`], with a derived task id worked out: the caller is identified here for it,
/// as the handler will identify it.
async fn a2a_route(
    state: &AppState,
    parts: &mut axum::http::request::Parts,
    body: &[u8],
) -> A2aRoute {
    use crate::a2a::caller::A2aCaller;
    use axum::extract::FromRequestParts as _;
    match a2a_target(parts.uri.path(), body) {
        A2aRoute::Derived { agent, message_id } => {
            match A2aCaller::from_request_parts(parts, state).await {
                Ok(A2aCaller(crate::auth::Caller::Agent(caller))) => A2aRoute::Task(
                    crate::a2a::inward::derived_task_id(&caller, &agent, &message_id),
                ),
                // Refused by the handler (401, 403), here.
                _ => A2aRoute::Here,
            }
        }
        route => route,
    }
}

/// The answer to a forwarded request this node cannot serve now: 503 marked [`MOVED`],
/// which the forwarding node takes as "route again".
fn not_here(id: &str) -> Response {
    moved(id, "not-owner")
}

/// 503 marked [`MOVED`] (`why`): the request was not applied here; route it again.
fn moved(id: &str, why: &'static str) -> Response {
    let mut response = unavailable(id);
    response
        .headers_mut()
        .insert(MOVED, HeaderValue::from_static(why));
    response
}

/// 503 `store_unavailable` with `Retry-After`: nobody holds the partition, and the lease
/// store does not answer, so nobody can take it before it does.
fn store_unreachable() -> Response {
    ApiError::from(colloquy_core::error::EngineError::Store(
        colloquy_core::store::StoreError::Unavailable(
            "the store does not answer: no node can take this conversation's partition now"
                .to_owned(),
        ),
    ))
    .into_response()
}

/// 503 with `Retry-After`: nobody holds the conversation's partition just now.
fn unavailable(id: &str) -> Response {
    let mut response = ApiError::Unavailable(format!(
        "conversation `{id}` is changing owner (its partition's lease is being taken over); \
         try again shortly"
    ))
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Headers that belong to one connection, not to the request or response.
const HOP_BY_HOP: [HeaderName; 5] = [
    header::CONNECTION,
    header::HOST,
    header::TRANSFER_ENCODING,
    header::CONTENT_LENGTH,
    header::UPGRADE,
];

/// Sends the request to the owner at `address` and hands its answer back (streamed: an
/// event stream stays a stream). `None`: the owner could not be reached and nothing was
/// sent (route again). No answer in time, or a connection lost mid-request, is answered
/// 503 here: the owner may have applied the request.
async fn forward(
    ownership: &Ownership,
    address: &str,
    parts: axum::http::request::Parts,
    body: axum::body::Bytes,
) -> Option<Response> {
    let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    let url = format!("{}{path}", address.trim_end_matches('/'));
    let mut headers = parts.headers.clone();
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(NODE_SECRET);
    headers.remove(FORWARDED_BY);
    // A client's own `ACT_AS` is never passed on: only one this node set.
    headers.remove(ACT_AS);
    if let Some(ActingAs(agent)) = parts.extensions.get::<ActingAs>()
        && let Ok(agent) = HeaderValue::from_str(agent)
    {
        headers.insert(ACT_AS, agent);
    }
    if let (Ok(node), Ok(secret)) = (
        HeaderValue::from_str(ownership.node().as_str()),
        HeaderValue::from_str(&ownership.secret),
    ) {
        headers.insert(FORWARDED_BY, node);
        headers.insert(NODE_SECRET, secret);
    }
    // Bounded until the answer begins, not after: an event stream goes on as long as it
    // lasts.
    let sent = tokio::time::timeout(
        ownership.forward_timeout,
        (ownership.client)
            .request(parts.method.clone(), &url)
            .headers(headers)
            .body(body)
            .send(),
    )
    .await;
    let answer = match sent {
        Ok(Ok(answer)) => answer,
        Ok(Err(error)) if error.is_connect() => {
            tracing::debug!(%error, owner = address, "the owner could not be reached");
            return None;
        }
        failed => {
            let why = match failed {
                Ok(Err(error)) => error.to_string(),
                _ => format!("no answer within {:?}", ownership.forward_timeout),
            };
            tracing::debug!(%why, owner = address, "a forward failed");
            let id = conversation_of(parts.uri.path()).unwrap_or("the conversation");
            return Some(unavailable(id));
        }
    };
    let mut response = Response::builder().status(answer.status());
    if let Some(headers) = response.headers_mut() {
        for (name, value) in answer.headers() {
            if !HOP_BY_HOP.contains(name) {
                headers.append(name.clone(), value.clone());
            }
        }
    }
    Some(
        response
            .body(Body::from_stream(answer.bytes_stream()))
            .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response()),
    )
}

/// The A2A bridge's [`Replies`](colloquy_a2a::outward::Replies) on a cluster of owners: the
/// node leading delivery to a remote A2A agent sends each of its answers to the
/// conversation's owner, as `POST /v1/conversations/{id}/messages` acting as the agent
/// ([`ACT_AS`]), routed and retried as any request ([`on_owner`]); served in this engine
/// when this node owns the conversation.
pub struct OwnerReplies {
    /// This node's ownership.
    pub ownership: Arc<Ownership>,
    /// This node's engine.
    pub engine: Arc<Engine>,
}

impl colloquy_a2a::outward::Replies for OwnerReplies {
    fn send_as<'a>(
        &'a self,
        conversation: &'a str,
        agent: &'a str,
        message: colloquy_protocol::message::SendMessage,
    ) -> futures_util::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let body = serde_json::to_vec(&message).map_err(|error| error.to_string())?;
            let (mut parts, ()) =
                Request::post(format!("/v1/conversations/{conversation}/messages"))
                    .header(header::CONTENT_TYPE, "application/json")
                    .body(())
                    .map_err(|error| error.to_string())?
                    .into_parts();
            parts
                .extensions
                .insert(ActingAs(colloquy_protocol::message::AgentId::from(agent)));
            let engine = &self.engine;
            let serve = |_: Request| {
                let message = message.clone();
                async move {
                    match engine.send(conversation, agent, message).await {
                        Ok(_) => StatusCode::OK.into_response(),
                        Err(error) => ApiError::from(error).into_response(),
                    }
                }
            };
            let answer = on_owner(
                &self.ownership,
                conversation,
                false,
                parts,
                body.into(),
                serve,
            )
            .await;
            let status = answer.status();
            if status.is_success() {
                return Ok(());
            }
            let said = axum::body::to_bytes(answer.into_body(), 64 * 1024)
                .await
                .unwrap_or_default();
            Err(format!("{status}: {}", String::from_utf8_lossy(&said)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conversation_is_read_from_the_path() {
        assert_eq!(conversation_of("/v1/conversations/c-1"), Some("c-1"));
        assert_eq!(
            conversation_of("/v1/conversations/c-1/messages"),
            Some("c-1")
        );
        assert_eq!(conversation_of("/v1/conversations"), None);
        assert_eq!(conversation_of("/v1/conversations/"), None);
        assert_eq!(conversation_of("/v1/agents/bob/inbox"), None);
    }

    #[test]
    fn a_drawn_id_is_written_first_into_the_start_body() {
        let named = |body: &str| {
            with_id(body.as_bytes(), "c-1").map(|bytes| String::from_utf8(bytes.to_vec()))
        };
        let parsed = |body: Option<Result<String, _>>| -> serde_json::Value {
            serde_json::from_str(&body.expect("an object").expect("utf-8")).expect("JSON")
        };
        assert_eq!(
            parsed(named(r#" {"template": "t", "participants": ["bob"]}"#)),
            serde_json::json!({"conversation_id": "c-1", "template": "t", "participants": ["bob"]})
        );
        assert_eq!(
            parsed(named("{ }")),
            serde_json::json!({"conversation_id": "c-1"})
        );
        assert!(named("[1]").is_none());
        assert!(named("").is_none());
    }

    #[test]
    fn a2a_calls_are_told_apart_from_agent_cards() {
        assert!(a2a_call(&Method::POST, "/a2a/bob"));
        assert!(a2a_call(&Method::POST, "/a2a/bob/"));
        assert!(a2a_call(
            &Method::GET,
            "/a2a/bob/rest/tasks/t-1/pushNotificationConfigs"
        ));
        assert!(!a2a_call(
            &Method::GET,
            "/a2a/bob/.well-known/agent-card.json"
        ));
        assert!(!a2a_call(&Method::POST, "/v1/conversations"));
    }

    #[test]
    fn an_a2a_call_is_routed_by_the_task_it_names() {
        let rpc = |method: &str, params: serde_json::Value| {
            let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method,
                                          "params": params});
            a2a_target("/a2a/bob", body.to_string().as_bytes())
        };
        let task = |id: &str| A2aRoute::Task(id.to_owned());
        assert_eq!(
            rpc("GetTask", serde_json::json!({"id": "t-1"})),
            task("t-1")
        );
        assert_eq!(
            rpc("tasks/cancel", serde_json::json!({"id": "t-1"})),
            task("t-1")
        );
        assert_eq!(
            rpc(
                "GetTaskPushNotificationConfig",
                serde_json::json!({"taskId": "t-1", "id": "config-9"})
            ),
            task("t-1"),
            "a push config call's `id` is the config's"
        );
        assert_eq!(
            rpc(
                "SendMessage",
                serde_json::json!({"message": {"messageId": "m", "task_id": "t-2"}})
            ),
            task("t-2")
        );
        assert_eq!(
            rpc(
                "message/send",
                serde_json::json!({"message": {"messageId": "m"}})
            ),
            A2aRoute::New
        );
        assert_eq!(
            rpc(
                "SendMessage",
                serde_json::json!({"message": {"messageId": "m",
                    "metadata": {"colloquy": {"conversation": "c-1"}}}})
            ),
            A2aRoute::Derived {
                agent: "bob".to_owned(),
                message_id: "m".to_owned()
            }
        );
        assert_eq!(rpc("ListTasks", serde_json::json!({})), A2aRoute::Here);
        assert_eq!(rpc("GetTask", serde_json::json!({"id": 7})), A2aRoute::Here);
        assert_eq!(a2a_target("/a2a/bob", b"not json"), A2aRoute::Here);

        let rest = |path: &str, body: &str| a2a_target(path, body.as_bytes());
        assert_eq!(rest("/a2a/bob/rest/tasks/t-3", ""), task("t-3"));
        assert_eq!(rest("/a2a/bob/rest/tasks/t-3:cancel", ""), task("t-3"));
        assert_eq!(
            rest("/a2a/bob/rest/tasks/t-3/pushNotificationConfigs/c", ""),
            task("t-3")
        );
        assert_eq!(rest("/a2a/bob/rest/tasks", ""), A2aRoute::Here);
        assert_eq!(rest("/a2a/bob/rest/extendedAgentCard", ""), A2aRoute::Here);
        assert_eq!(
            rest(
                "/a2a/bob/rest/message:send",
                r#"{"message": {"messageId": "m", "taskId": "t-4"}}"#
            ),
            task("t-4")
        );
        assert_eq!(
            rest(
                "/a2a/bob/rest/message:stream",
                r#"{"message": {"messageId": "m"}}"#
            ),
            A2aRoute::New
        );
    }

    #[tokio::test]
    async fn an_answer_hiding_a_fenced_commit_is_routed_again() {
        let fenced = unless_fenced("c-1", async {
            note_fenced();
            StatusCode::OK.into_response()
        })
        .await;
        assert_eq!(fenced.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(fenced.headers()[MOVED], "fenced");
        let served = unless_fenced("c-1", async { StatusCode::OK.into_response() }).await;
        assert_eq!(served.status(), StatusCode::OK);
        assert!(!served.headers().contains_key(MOVED));
        // Outside a routed request it notes nothing, and does not panic.
        note_fenced();
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"s3cret", b"s3cret"));
        assert!(!same_secret(b"s3cret", b"s3creT"));
        assert!(!same_secret(b"s3cret", b"s3cret!"));
    }
}
