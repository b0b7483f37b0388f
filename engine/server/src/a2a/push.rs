//! Push notifications: an A2A client names a webhook for a task (`CreateTaskPushNotificationConfig`,
//! or `configuration.taskPushNotificationConfig` of its `SendMessage`), and the engine POSTs
//! the task's updates there as they happen, each a v1.0 `StreamResponse` (`statusUpdate`,
//! `artifactUpdate`), as the task's stream would carry them.
//!
//! - **Durable.** Configs are kept in the store ([`PushConfig`]) with a cursor: how far the
//!   pushed updates cover the conversation (its messages, and its end). Updates are computed from the
//!   conversation's log past the cursor, so a config set after the task moved still gets
//!   what happened, and an engine restarted on a durable store goes on from the cursor
//!   ([`resume`]). Delivery is at least once.
//! - **Retried** as webhooks are ([`colloquy_core::retries`]): a network error or a 5xx is tried
//!   again with backoff, 8 attempts; a 4xx (but 408 and 429) is the receiver's refusal and
//!   is not repeated.
//! - **Authenticated** as the config says: `Authorization: {scheme} {credentials}` and the
//!   client's `token` in `X-A2A-Notification-Token`.
//! - **Never to private addresses** (SSRF): a URL whose host is, or resolves to, a loopback,
//!   private, link-local or unspecified address is refused when the config is set, and
//!   checked again before each delivery (DNS may change), unless the operator allows it
//!   (`colloquy serve --a2a-push-allow-private`, for development and tests). No redirects
//!   are followed.
//!
//! One follower task per config, on the node where it was set (after a restart, on the node
//! that resumes it); with several nodes over one Redis, each resumes every config at start,
//! so an update may be pushed twice (at least once still holds). On a cluster of partition
//! owners a config is followed on its conversation's owner only: set there (the call is
//! routed to it), given up when the partition moves (or this node's lease on it lapses), and
//! taken up by the node that takes the partition ([`follow_owned`]), from the cursor kept in
//! the store.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use colloquy_protocol::a2a::RpcError;
use colloquy_protocol::conversation::{ConversationStatus, ConversationView};
use serde::Deserialize;
use serde_json::{Value, json};
use tracing::Instrument as _;

use super::inward::{code, rpc_error, task_of};
use super::stream;
use super::v1::Version;
use crate::AppState;
use colloquy_core::retries::{ATTEMPTS, FIRST_BACKOFF, MAX_BACKOFF};
use colloquy_core::store::{PushAuthentication, PushConfig};

/// Longest a webhook may take to answer one update.
pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Most configs one task may have.
pub const MAX_CONFIGS_PER_TASK: usize = 10;
/// Longest URL, token or credentials accepted.
const MAX_FIELD: usize = 2048;

/// The followers running here, by (conversation, config id), each with a generation: a
/// config set again, or deleted, stops the follower of the one before.
/// Writes of configs (a cursor moving, a config set or deleted) take turns (`writes`), so
/// a follower that was under way cannot write back a config just deleted or replaced.
#[derive(Default)]
pub struct Followers {
    running: Mutex<HashMap<(Arc<str>, String), u64>>,
    writes: tokio::sync::Mutex<()>,
}

impl Followers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Arc<str>, String), u64>> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a follower for `key` and returns its generation.
    fn enter(&self, key: (Arc<str>, String)) -> u64 {
        let mut followers = self.lock();
        let generation = followers.get(&key).map_or(1, |g| g + 1);
        followers.insert(key, generation);
        generation
    }

    fn is_current(&self, key: &(Arc<str>, String), generation: u64) -> bool {
        self.lock().get(key) == Some(&generation)
    }

    fn leave(&self, key: &(Arc<str>, String), generation: u64) {
        let mut followers = self.lock();
        if followers.get(key) == Some(&generation) {
            followers.remove(key);
        }
    }

    fn stop(&self, key: &(Arc<str>, String)) {
        self.lock().remove(key);
    }

    fn is_running(&self, key: &(Arc<str>, String)) -> bool {
        self.lock().contains_key(key)
    }
}

/// A `TaskPushNotificationConfig` as a client sends it (JSON names or proto field names).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigRequest {
    /// The task (absent inside `SendMessage`'s configuration: the new task).
    #[serde(default, alias = "task_id")]
    pub task_id: Option<String>,
    /// The config's id; one is made up when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// Where updates go.
    pub url: String,
    /// Echoed in `X-A2A-Notification-Token`.
    #[serde(default)]
    pub token: Option<String>,
    /// `{"scheme", "credentials"}`.
    #[serde(default)]
    pub authentication: Option<AuthenticationRequest>,
    /// A tenant (one per engine here: ignored).
    #[serde(default)]
    pub tenant: Option<String>,
}

/// `AuthenticationInfo`.
#[derive(Debug, Deserialize)]
pub struct AuthenticationRequest {
    /// `Bearer`, `Basic`, …
    pub scheme: String,
    /// The token or credentials.
    #[serde(default)]
    pub credentials: String,
}

/// `GetTaskPushNotificationConfig`'s and `DeleteTaskPushNotificationConfig`'s params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigId {
    /// The task.
    #[serde(alias = "task_id")]
    pub task_id: String,
    /// The config.
    pub id: String,
    /// A tenant (ignored).
    #[serde(default)]
    pub tenant: Option<String>,
}

/// `ListTaskPushNotificationConfigs`' params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigList {
    /// The task.
    #[serde(alias = "task_id")]
    pub task_id: String,
    /// Ignored: a task has at most [`MAX_CONFIGS_PER_TASK`] configs, all on one page.
    #[serde(default, alias = "page_size")]
    pub page_size: Option<i32>,
    /// Ignored, as the page size.
    #[serde(default, alias = "page_token")]
    pub page_token: Option<String>,
    /// A tenant (ignored).
    #[serde(default)]
    pub tenant: Option<String>,
}

impl ConfigRequest {
    /// The config it asks for on `task`, for `owner`, once its URL and fields are checked
    /// (see the module's docs on private addresses). `Err` says which field is wrong.
    pub async fn checked(
        self,
        task: &str,
        owner: &str,
        allow_private: bool,
    ) -> Result<PushConfig, String> {
        let too_long = |field: &str, value: &str| {
            (value.len() > MAX_FIELD).then(|| format!("{field}: longer than {MAX_FIELD} bytes"))
        };
        for (field, value) in [
            ("url", Some(self.url.as_str())),
            ("token", self.token.as_deref()),
            (
                "authentication.credentials",
                self.authentication.as_ref().map(|a| a.credentials.as_str()),
            ),
        ] {
            if let Some(why) = value.and_then(|value| too_long(field, value)) {
                return Err(why);
            }
        }
        let id = match self.id.filter(|id| !id.is_empty()) {
            Some(id) if colloquy_core::ids::is_id(&id) => id,
            Some(_) => {
                return Err(
                    "id: letters, digits, `-`, `_`, `.` and `:` only, at most 128 \
                            bytes"
                        .to_owned(),
                );
            }
            None => colloquy_core::engine::new_id().to_string(),
        };
        if let Some(authentication) = &self.authentication {
            let scheme = authentication.scheme.trim();
            if scheme.is_empty()
                || !scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                return Err(
                    "authentication.scheme: an HTTP authentication scheme (`Bearer`, `Basic`)"
                        .to_owned(),
                );
            }
            if authentication.credentials.contains(['\r', '\n']) {
                return Err("authentication.credentials: no line breaks".to_owned());
            }
        }
        if self
            .token
            .as_deref()
            .is_some_and(|t| t.contains(['\r', '\n']))
        {
            return Err("token: no line breaks".to_owned());
        }
        check_url(&self.url, allow_private).await?;
        Ok(PushConfig {
            conversation_id: Arc::from(task),
            id,
            owner: Arc::from(owner),
            url: self.url,
            token: self.token.filter(|token| !token.is_empty()),
            authentication: self.authentication.map(|a| PushAuthentication {
                scheme: a.scheme.trim().to_owned(),
                credentials: a.credentials,
            }),
            delivered: 0,
        })
    }
}

/// A config as v1.0 writes it (`TaskPushNotificationConfig`).
pub fn config_json(config: &PushConfig) -> Value {
    let mut out = json!({
        "id": config.id,
        "taskId": &*config.conversation_id,
        "url": config.url,
    });
    if let Some(token) = &config.token {
        out["token"] = json!(token);
    }
    if let Some(authentication) = &config.authentication {
        out["authentication"] = json!({
            "scheme": authentication.scheme,
            "credentials": authentication.credentials,
        });
    }
    out
}

/// `url` if updates may be pushed there: `http` or `https`, with a host that is not (and
/// does not resolve to) a private address unless `allow_private`. A name that does not
/// resolve now passes: it is checked again before each delivery.
pub async fn check_url(url: &str, allow_private: bool) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|error| format!("url: not a URL ({error})"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("url: `{}` is not http or https", parsed.scheme()));
    }
    let host = parsed
        .host_str()
        .ok_or_else(|| "url: it names no host".to_owned())?;
    if allow_private {
        return Ok(());
    }
    let refused = |address: &str| {
        format!(
            "url: `{address}` is a loopback, private or link-local address, where this engine \
             pushes nothing (the operator can allow it: --a2a-push-allow-private)"
        )
    };
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return if is_private(ip) {
            Err(refused(literal))
        } else {
            Ok(())
        };
    }
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return Err(refused(&name));
    }
    let port = parsed.port_or_known_default().unwrap_or(443);
    if let Ok(Ok(addresses)) = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::lookup_host((name.as_str(), port)),
    )
    .await
    {
        for address in addresses {
            if is_private(address.ip()) {
                return Err(refused(&format!("{name} ({})", address.ip())));
            }
        }
    }
    Ok(())
}

/// Loopback, private (RFC 1918, unique local), link-local, carrier-grade NAT, unspecified
/// or broadcast: addresses of the engine's own network, never a client's webhook on the
/// internet.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => is_private_v4(ip),
        IpAddr::V6(ip) => match ip.to_ipv4_mapped() {
            Some(v4) => is_private_v4(v4),
            None => is_private_v6(ip),
        },
    }
}

fn is_private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
}

fn is_private_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
}

/// Keeps `config` and starts pushing its task's updates. Replaces a config of the same id.
pub async fn set(state: &AppState, config: PushConfig) -> Result<PushConfig, RpcError> {
    let engine = state.engine();
    let _turn = state.a2a_followers().writes.lock().await;
    let configs = engine.store().push_configs().await.map_err(store_error)?;
    let someone_elses = configs.iter().any(|kept| {
        kept.conversation_id == config.conversation_id
            && kept.id == config.id
            && kept.owner != config.owner
    });
    if someone_elses {
        return Err(rpc_error(
            code::INVALID_PARAMS,
            format!(
                "push config id `{}` is taken on task `{}`; choose another, or none",
                config.id, config.conversation_id
            ),
        ));
    }
    let others = configs
        .iter()
        .filter(|kept| kept.conversation_id == config.conversation_id && kept.id != config.id)
        .count();
    if others >= MAX_CONFIGS_PER_TASK {
        return Err(rpc_error(
            code::INVALID_PARAMS,
            format!(
                "task `{}` has {MAX_CONFIGS_PER_TASK} push configs already; delete one first",
                config.conversation_id
            ),
        ));
    }
    engine
        .store()
        .keep_push_config(&config)
        .await
        .map_err(store_error)?;
    follow(state.clone(), config.clone());
    Ok(config)
}

/// The configs of `task` (which the caller has been allowed to read).
pub async fn of_task(state: &AppState, task: &str) -> Result<Vec<PushConfig>, RpcError> {
    let mut configs: Vec<PushConfig> = state
        .engine()
        .store()
        .push_configs()
        .await
        .map_err(store_error)?
        .into_iter()
        .filter(|config| &*config.conversation_id == task)
        .collect();
    configs.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(configs)
}

/// Forgets config `id` of `task` and stops pushing for it; no error when there is none.
pub async fn delete(state: &AppState, task: &str, id: &str) -> Result<(), RpcError> {
    let _turn = state.a2a_followers().writes.lock().await;
    state
        .a2a_followers()
        .stop(&(Arc::from(task), id.to_owned()));
    state
        .engine()
        .store()
        .forget_push_config(task, id)
        .await
        .map_err(store_error)
}

/// With partition owners: each time the partitions this node holds change, follows the kept
/// configs of the conversations it owns now and does not follow yet (from their cursors).
/// The followers of conversations it no longer owns stop by themselves. Runs until aborted.
pub async fn follow_owned(state: AppState, ownership: Arc<crate::ownership::Ownership>) {
    let mut changes = ownership.held_changes();
    loop {
        changes.borrow_and_update();
        match state.engine().store().push_configs().await {
            Ok(configs) => {
                for config in configs {
                    let key = (config.conversation_id.clone(), config.id.clone());
                    if ownership.owns(&config.conversation_id)
                        && !state.a2a_followers().is_running(&key)
                    {
                        follow(state.clone(), config);
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "push configs could not be read: trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// Whether this node follows conversation `id`'s configs: always, unless partitions have
/// owners and another node owns it.
fn serves(state: &AppState, id: &str) -> bool {
    state.ownership().is_none_or(|ownership| ownership.owns(id))
}

/// Starts a follower for every kept config: at start, so an engine restarted on a durable
/// store goes on pushing from each cursor.
pub async fn resume(state: AppState) {
    match state.engine().store().push_configs().await {
        Ok(configs) => {
            for config in configs {
                follow(state.clone(), config);
            }
        }
        Err(error) => tracing::warn!(%error, "push configs could not be read: none resumed"),
    }
}

fn store_error(error: colloquy_core::store::StoreError) -> RpcError {
    tracing::warn!(%error, "a push config could not be read or kept");
    rpc_error(
        code::INTERNAL_ERROR,
        "the engine could not do it now; try again",
    )
}

/// Pushes `config`'s task's updates until the task ends (or the config is replaced or
/// deleted, or the server shuts down).
fn follow(state: AppState, mut config: PushConfig) {
    let key = (config.conversation_id.clone(), config.id.clone());
    let generation = state.a2a_followers().enter(key.clone());
    tokio::spawn(async move {
        let client = match reqwest::Client::builder()
            .timeout(DELIVERY_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
        {
            Ok(client) => client,
            Err(error) => {
                tracing::warn!(%error, "no HTTP client for push notifications");
                return;
            }
        };
        let engine = state.engine().clone();
        let listener = engine.listen_conversation(&config.conversation_id);
        let mut closing = state.closing();
        let mut backoff = FIRST_BACKOFF;
        loop {
            if !state.a2a_followers().is_current(&key, generation) {
                return;
            }
            if !serves(&state, &config.conversation_id) {
                // Its new owner follows it from the cursor kept in the store.
                state.a2a_followers().leave(&key, generation);
                return;
            }
            let rung = listener.next_ring();
            let view = match engine
                .view(&config.conversation_id, Some(&config.owner))
                .await
            {
                Ok(view) => {
                    backoff = FIRST_BACKOFF;
                    view
                }
                Err(error)
                    if matches!(
                        error.kind(),
                        colloquy_core::error::ErrorKind::NotFound
                            | colloquy_core::error::ErrorKind::Forbidden
                    ) =>
                {
                    // The conversation is gone (retention), or not the owner's to see: so
                    // is its config.
                    let _ = engine
                        .store()
                        .forget_push_config(&config.conversation_id, &config.id)
                        .await;
                    state.a2a_followers().leave(&key, generation);
                    return;
                }
                Err(_) => {
                    // The store is away: ask again, less and less often.
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            let covered = u64::try_from(stream::progress(&view)).unwrap_or(u64::MAX);
            if covered > config.delivered {
                for event in updates_since(&view, config.delivered) {
                    if !state.a2a_followers().is_current(&key, generation) {
                        return;
                    }
                    if let Err(why) = deliver(
                        state.engine(),
                        &client,
                        &config,
                        &event,
                        state.a2a_push_allow_private(),
                    )
                    .await
                    {
                        tracing::warn!(
                            conversation = %colloquy_core::log_safe::LogSafe(&config.conversation_id),
                            config = %colloquy_core::log_safe::LogSafe(&config.id),
                            "a push notification was given up: {why}"
                        );
                    }
                }
                config.delivered = covered;
                let _turn = state.a2a_followers().writes.lock().await;
                if !state.a2a_followers().is_current(&key, generation) {
                    // Deleted or replaced while this follower pushed: nothing to keep.
                    return;
                }
                if let Err(error) = engine.store().keep_push_config(&config).await {
                    tracing::warn!(%error, "a push cursor could not be kept");
                }
            }
            if view.status == ConversationStatus::Completed {
                state.a2a_followers().leave(&key, generation);
                return;
            }
            tokio::select! {
                _ = rung => {}
                () = moved_away(&state, &config.conversation_id) => {}
                _ = closing.wait_for(|closing| *closing) => return,
            }
        }
    });
}

/// Returns once conversation `id` is no longer this node's
/// ([`Ownership::until_moved`](crate::ownership::Ownership::until_moved)); never without
/// partition owners.
async fn moved_away(state: &AppState, id: &str) {
    match state.ownership() {
        Some(ownership) => ownership.until_moved(id).await,
        None => std::future::pending().await,
    }
}

/// The `StreamResponse`s for what happened in `view` after `delivered` steps (the
/// stream's [`stream::progress`]), as the task's stream carries them.
pub fn updates_since(view: &ConversationView, delivered: u64) -> Vec<Value> {
    let delivered = usize::try_from(delivered).unwrap_or(usize::MAX);
    // The artifacts of the steps already pushed count as sent.
    let mut artifacts_sent: HashSet<String> = task_of(&stream::at_step(view, delivered))
        .artifacts
        .into_iter()
        .filter_map(|artifact| artifact.artifact_id)
        .collect();
    stream::updates_since(view, delivered, &mut artifacts_sent, Version::V1_0)
}

/// POSTs one update, retrying as webhooks do, each attempt a client span (a child of the
/// span the conversation started in, its context sent as `traceparent`) while traces are
/// exported. `Err` says why it was given up.
async fn deliver(
    engine: &colloquy_core::engine::Engine,
    client: &reqwest::Client,
    config: &PushConfig,
    event: &Value,
    allow_private: bool,
) -> Result<(), String> {
    let mut backoff = FIRST_BACKOFF;
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        if attempt > 1 {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        // Checked at each attempt: the name may resolve elsewhere than when it was set.
        check_url(&config.url, allow_private).await?;
        let mut request = client
            .post(&config.url)
            .header("content-type", "application/json")
            .body(event.to_string());
        if let Some(token) = &config.token {
            request = request.header("x-a2a-notification-token", token);
        }
        if let Some(authentication) = &config.authentication {
            request = request.header(
                "authorization",
                format!("{} {}", authentication.scheme, authentication.credentials),
            );
        }
        let span = crate::request_spans::webhook_span(
            engine,
            &config.owner,
            &config.conversation_id,
            &config.url,
        );
        if !span.is_disabled() {
            let mut headers = reqwest::header::HeaderMap::new();
            crate::request_spans::inject(&span, &mut headers);
            request = request.headers(headers);
        }
        let result = request.send().instrument(span.clone()).await;
        let status = result.as_ref().ok().map(reqwest::Response::status);
        crate::request_spans::record_outcome(
            &span,
            status,
            !status.is_some_and(|status| status.is_success()),
        );
        match result {
            Ok(response) if response.status().is_success() => return Ok(()),
            Ok(response) => {
                let status = response.status();
                last = format!("the webhook answered {status}");
                let retried = status.is_server_error()
                    || status == reqwest::StatusCode::REQUEST_TIMEOUT
                    || status == reqwest::StatusCode::TOO_MANY_REQUESTS;
                if !retried {
                    return Err(last);
                }
            }
            Err(error) => last = format!("the webhook could not be reached: {error}"),
        }
    }
    Err(format!("{last}, {ATTEMPTS} attempts"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_addresses_are_told_apart_from_the_internet() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(
                is_private(private.parse().expect("an address")),
                "{private}"
            );
        }
        for public in ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "172.32.0.1"] {
            assert!(!is_private(public.parse().expect("an address")), "{public}");
        }
    }

    #[tokio::test]
    async fn push_urls_to_the_engines_own_network_are_refused_unless_allowed() {
        for url in [
            "http://127.0.0.1:9/hook",
            "http://[::1]/hook",
            "http://localhost:8080/hook",
            "http://metadata.localhost/hook",
            "http://169.254.169.254/latest",
        ] {
            let why = check_url(url, false).await.expect_err(url);
            assert!(why.contains("private"), "{why}");
            assert!(check_url(url, true).await.is_ok(), "{url} when allowed");
        }
        for (url, says) in [
            ("ftp://example.com/x", "not http"),
            ("not a url", "not a URL"),
        ] {
            let why = check_url(url, true).await.expect_err(url);
            assert!(why.contains(says), "{url}: {why}");
        }
        assert!(check_url("https://93.184.216.34/hook", false).await.is_ok());
    }
}
