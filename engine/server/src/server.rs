//! Putting the service together: a metered store, the engine and its scheduler, webhook
//! delivery, and the router on a listener, with a graceful shutdown.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use colloquy_policy::Catalog;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{AppState, Identity, listen, router};
use crate::delivery;
use colloquy_core::clock::{Clock, SystemClock};
use colloquy_core::engine::{Engine, EngineConfig, TemplateSource};
use colloquy_core::metrics::{MeteredStore, Metrics};
use colloquy_core::store::{ConversationStore, MemoryStore};

/// How often the scheduler looks for due deadlines: the granularity of every deadline
/// (a reply-by fires at most this late), cheap with the memory store's ordered index.
pub const SCHEDULER_PERIOD: Duration = Duration::from_millis(50);

/// How a service is set up.
pub struct ServiceOptions {
    /// Who may call.
    pub identity: Identity,
    /// The engine's clock.
    pub clock: Arc<dyn Clock>,
    /// Engine settings.
    pub engine: EngineConfig,
    /// Scheduler period.
    pub scheduler_period: Duration,
    /// How often inboxes are swept for entries past the inbox TTL
    /// ([`colloquy_core::inbox_expiry::SWEEP_PERIOD`] by default).
    pub inbox_sweep_period: Duration,
    /// The store; the memory store when `None`.
    pub store: Option<Arc<dyn ConversationStore>>,
    /// Where templates come from instead of the fixed `catalog` given to [`launch`]: a
    /// policy manager's live catalog, so reloads reach the engine (and `/readyz`).
    pub templates: Option<Arc<dyn TemplateSource>>,
    /// More routes served next to the engine's (the embedded policy manager's API).
    pub routes: Option<axum::Router>,
    /// The wasm hook runtime; without one, templates that name a hook refuse (or, under
    /// `fail_open`, flag) every message that would call it.
    pub hooks: Option<Arc<colloquy_hooks::HookRuntime>>,
    /// How A2A clients are served: the default template of their tasks, where push
    /// notifications may go.
    pub a2a: crate::a2a::Settings,
    /// Told of every acknowledged commit of the templates it watches: the rollouts' shadow
    /// twins and canary tallies ([`crate::rollout::Rollouts`]).
    pub commit_observer: Option<Arc<dyn colloquy_core::metrics::CommitObserver>>,
    /// The MCP endpoint (`/mcp`) and which hosts and origins it takes; none without.
    pub mcp: Option<crate::mcp::McpSettings>,
    /// The engine's key that signs audit records (`--audit-key`); unsigned records without.
    pub audit_key: Option<Arc<colloquy_trust::jws::Signer>>,
    /// Several nodes sharing the store's partitions: each conversation served by the node
    /// holding its lease (`crate::ownership`); `None`, one node serves everything.
    pub ownership: Option<crate::ownership::OwnershipSettings>,
}

impl Default for ServiceOptions {
    fn default() -> ServiceOptions {
        ServiceOptions {
            identity: Identity::Open,
            clock: Arc::new(SystemClock),
            engine: EngineConfig::default(),
            scheduler_period: SCHEDULER_PERIOD,
            inbox_sweep_period: colloquy_core::inbox_expiry::SWEEP_PERIOD,
            store: None,
            templates: None,
            routes: None,
            hooks: None,
            a2a: crate::a2a::Settings::default(),
            commit_observer: None,
            mcp: None,
            audit_key: None,
            ownership: None,
        }
    }
}

/// A service accepting requests. Dropping it stops everything at once; [`shutdown`] lets
/// requests in flight finish.
///
/// [`shutdown`]: RunningService::shutdown
pub struct RunningService {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its engine.
    pub engine: Arc<Engine>,
    /// Its counters.
    pub metrics: Arc<Metrics>,
    closing: watch::Sender<bool>,
    server: Option<JoinHandle<io::Result<()>>>,
    background: Vec<JoinHandle<()>>,
}

impl RunningService {
    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting connections, ends the streams, waits for requests in flight.
    pub async fn shutdown(mut self) -> io::Result<()> {
        // Send fails only when no receiver is left, which means nothing is listening anyway.
        let _ = self.closing.send(true);
        let result = match self.server.take() {
            Some(server) => server
                .await
                .unwrap_or_else(|error| Err(io::Error::other(error))),
            None => Ok(()),
        };
        for task in self.background.drain(..) {
            task.abort();
        }
        result
    }

    /// Runs until the server fails (it does not stop on its own otherwise).
    pub async fn wait(mut self) -> io::Result<()> {
        match self.server.take() {
            Some(server) => server
                .await
                .unwrap_or_else(|error| Err(io::Error::other(error))),
            None => Ok(()),
        }
    }
}

impl Drop for RunningService {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
        for task in self.background.drain(..) {
            task.abort();
        }
    }
}

/// Starts the service on `listener` over the templates of `catalog`.
pub fn launch(
    catalog: Catalog,
    listener: TcpListener,
    options: ServiceOptions,
) -> io::Result<RunningService> {
    let addr = listener.local_addr()?;
    let metrics = Arc::new(Metrics::new());
    let inner = options
        .store
        .unwrap_or_else(|| Arc::new(MemoryStore::new()));
    let store = MeteredStore::new(inner, metrics.clone());
    let store = Arc::new(match options.commit_observer {
        Some(observer) => {
            metrics.render_also(observer.clone());
            store.with_observer(observer)
        }
        None => store,
    });
    let source: Arc<dyn TemplateSource> = match options.templates {
        Some(source) => source,
        None => Arc::new(catalog),
    };
    let ownership = options.ownership.map(|settings| {
        Arc::new(crate::ownership::Ownership::new(
            settings,
            &format!("http://{addr}"),
        ))
    });
    let mut config = options.engine;
    config.inboxless.extend(options.identity.inboxless());
    if let Some(ownership) = &ownership {
        config.fencer = Some(ownership.clone());
    }
    let engine = Engine::new(source, store, options.clock, config);
    let engine = Arc::new(match options.hooks {
        Some(runtime) => engine.with_hooks(runtime),
        None => engine,
    });
    let mut background = vec![
        engine.spawn_scheduler(options.scheduler_period),
        engine.spawn_inbox_expiry(options.inbox_sweep_period),
    ];
    // Other engine nodes' commits (shared Redis store) reach this node's streams.
    background.extend(engine.follow_store());
    let channels: HashMap<_, _> = options
        .identity
        .webhooks()
        .into_iter()
        .map(|(agent, url)| (agent, delivery::Channel::Webhook(url)))
        .chain(
            options
                .identity
                .a2a_agents()
                .into_iter()
                .map(|(agent, endpoint)| (agent, delivery::Channel::A2a(endpoint))),
        )
        .collect();
    if !channels.is_empty() {
        // A remote A2A agent's answers go to the conversation's owner.
        let replies: Arc<dyn colloquy_a2a::outward::Replies> = match &ownership {
            Some(ownership) => Arc::new(crate::ownership::OwnerReplies {
                ownership: ownership.clone(),
                engine: engine.clone(),
            }),
            None => engine.clone(),
        };
        background.push(delivery::spawn_push(
            engine.clone(),
            metrics.clone(),
            channels,
            options.a2a.trust_store.clone(),
            replies,
        ));
    }
    if let Some(ownership) = &ownership {
        background.push(ownership.spawn_ticks(engine.clone()));
    }
    let (closing, closing_rx) = watch::channel(false);
    let state = AppState::new(
        engine.clone(),
        options.identity,
        metrics.clone(),
        closing_rx.clone(),
    )
    .with_a2a(options.a2a)
    .with_audit_key(options.audit_key)
    .with_ownership(ownership.clone());
    // Push notifications set before a restart go on from their cursors: on their
    // conversations' owners, with partition owners.
    background.push(tokio::spawn(match &ownership {
        Some(ownership) => futures_util::future::Either::Left(crate::a2a::push::follow_owned(
            state.clone(),
            ownership.clone(),
        )),
        None => futures_util::future::Either::Right(crate::a2a::push::resume(state.clone())),
    }));
    let mut app = router(state.clone());
    if ownership.is_some() {
        // Inside the gate and the request span: a forward is traced, and its caller is
        // checked again by the owner with the credentials it forwards.
        app = app.layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::ownership::route_to_owner,
        ));
    }
    if let Some(routes) = options.routes {
        // The fallback goes to the routes registered before it, so again after the merge:
        // a wrong method on a merged route is a JSON 405 too.
        app = app
            .merge(routes)
            .method_not_allowed_fallback(super::ops::method_not_allowed);
    }
    if let Some(settings) = options.mcp {
        // The MCP tools call the API as it stands here, without `/mcp` itself.
        let streams_end = tokio_util::sync::CancellationToken::new();
        let mut closing = closing_rx.clone();
        let cancel = streams_end.clone();
        background.push(tokio::spawn(async move {
            let _ = closing.wait_for(|closing| *closing).await;
            cancel.cancel();
        }));
        let mcp = crate::mcp::router(app.clone(), &state, settings, streams_end);
        app = app
            .merge(mcp)
            .method_not_allowed_fallback(super::ops::method_not_allowed);
    }
    // With credentials to check, every route (the merged ones included) identifies callers
    // after the gate; open mode has none to count or refresh, and skips its cost.
    if matches!(state.identity(), Identity::Tokens { .. }) {
        app = app.layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::auth::gate,
        ));
    }
    // Outermost, so a request refused at the gate is traced too; through `Router::layer`,
    // so the matched route is known. Not there at all unless traces are exported.
    if colloquy_core::trace_origins::exporting() {
        app = app.layer(axum::middleware::from_fn(
            crate::request_spans::trace_request,
        ));
    }
    if let Some(jwt) = state.identity().jwt() {
        background.push(
            jwt.jwks()
                .clone()
                .spawn_periodic_refresh(crate::auth::jwks::REFRESH_PERIOD),
        );
    }
    let mut shutdown = closing_rx;
    let server = listen::spawn(listener, app, async move {
        // An error means the sender is gone: shut down as well.
        let _ = shutdown.wait_for(|closing| *closing).await;
    });
    Ok(RunningService {
        addr,
        engine,
        metrics,
        closing,
        server: Some(server),
        background,
    })
}
