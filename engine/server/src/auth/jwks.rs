//! The identity provider's keys (`--auth-jwks FILE|URL`), kept as an immutable [`KeySet`]
//! snapshot that is swapped whole: read at start, again when a token names a `kid` the
//! snapshot lacks (at most once per [`UNKNOWN_KID_REFRESH`]), and every [`REFRESH_PERIOD`].
//! A key rotation at the provider is thus followed without a restart. A fetch that fails or
//! a document that does not parse keeps the last good set and is logged (reload is
//! all-or-nothing).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use super::jwt::{KeySet, KeySetError};

/// Shortest time between two refreshes caused by unknown `kid`s: tokens with made-up kids
/// must not make this server hammer the identity provider.
pub const UNKNOWN_KID_REFRESH: Duration = Duration::from_secs(60);
/// How often the key set is read again regardless, so a key the provider withdrew stops
/// being trusted.
pub const REFRESH_PERIOD: Duration = Duration::from_secs(600);
/// How long one fetch of a JWKS URL may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest JWKS document read; real ones are a few kilobytes.
pub const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// Where the keys come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwksSource {
    /// A local file.
    File(PathBuf),
    /// An `http(s)` URL, typically the provider's `jwks_uri`.
    Url(String),
}

impl JwksSource {
    /// A URL when `spec` starts with `http://` or `https://`, else a file path.
    pub fn parse(spec: &str) -> JwksSource {
        if super::is_http_url(spec) {
            JwksSource::Url(spec.to_owned())
        } else {
            JwksSource::File(PathBuf::from(spec))
        }
    }
}

impl std::fmt::Display for JwksSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JwksSource::File(path) => write!(f, "{}", path.display()),
            JwksSource::Url(url) => f.write_str(url),
        }
    }
}

/// Why the keys could not be read.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    /// The file could not be read.
    #[error("cannot read the JWKS {source_name}: {error}")]
    Read {
        /// The file.
        source_name: String,
        /// Why.
        error: std::io::Error,
    },
    /// The URL could not be fetched.
    #[error("cannot fetch the JWKS {source_name}: {error}")]
    Fetch {
        /// The URL.
        source_name: String,
        /// Why.
        error: String,
    },
    /// The document is no JWKS.
    #[error("the JWKS {source_name}: {error}")]
    Parse {
        /// Where it came from.
        source_name: String,
        /// Why.
        error: KeySetError,
    },
    /// The document holds no key usable here.
    #[error("the JWKS {source_name} holds no RSA, EC P-256 or Ed25519 signing key (it needs one)")]
    NoKeys {
        /// Where it came from.
        source_name: String,
    },
}

/// The key set and how it is kept fresh.
#[derive(Debug)]
pub struct JwksCache {
    source: JwksSource,
    keys: RwLock<Arc<KeySet>>,
    /// When the last refresh for an unknown kid started.
    last_unknown_kid: Mutex<Option<Instant>>,
    /// One refresh at a time.
    refreshing: tokio::sync::Mutex<()>,
    client: reqwest::Client,
    min_unknown_kid_interval: Duration,
}

impl JwksCache {
    /// Reads the keys once; fails when they cannot be read or none is usable.
    pub async fn load(source: JwksSource) -> Result<JwksCache, JwksError> {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|error| JwksError::Fetch {
                source_name: source.to_string(),
                error: error.to_string(),
            })?;
        let keys = read(&source, &client).await?;
        Ok(JwksCache {
            source,
            keys: RwLock::new(Arc::new(keys)),
            last_unknown_kid: Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
            client,
            min_unknown_kid_interval: UNKNOWN_KID_REFRESH,
        })
    }

    /// The same cache refreshing for unknown kids at most once per `interval` (tests use a
    /// shorter one than [`UNKNOWN_KID_REFRESH`]).
    pub fn with_unknown_kid_interval(mut self, interval: Duration) -> JwksCache {
        self.min_unknown_kid_interval = interval;
        self
    }

    /// Where the keys come from.
    pub fn source(&self) -> &JwksSource {
        &self.source
    }

    /// The current key set.
    pub fn keys(&self) -> Arc<KeySet> {
        // A poisoned lock still holds a whole snapshot: a writer only swaps an Arc.
        self.keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reads the keys again and swaps them in; on failure the last good set stays.
    pub async fn refresh(&self) -> Result<(), JwksError> {
        let _one_at_a_time = self.refreshing.lock().await;
        let keys = read(&self.source, &self.client).await?;
        *self
            .keys
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(keys);
        Ok(())
    }

    /// Makes sure the key set has seen `kid`: refreshes when it lacks it, unless a refresh
    /// for an unknown kid happened less than the interval ago.
    pub async fn know(&self, kid: &str) {
        if self.keys().has_kid(kid) || !self.may_refresh_for_unknown_kid(Instant::now()) {
            return;
        }
        match self.refresh().await {
            Ok(()) => tracing::info!(source = %self.source, "JWKS refreshed for an unknown kid"),
            Err(error) => tracing::warn!(%error, "JWKS refresh failed; the last keys stay"),
        }
    }

    /// Whether a refresh for an unknown kid may start at `now` (and, if so, notes it).
    fn may_refresh_for_unknown_kid(&self, now: Instant) -> bool {
        let mut last = self
            .last_unknown_kid
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match *last {
            Some(at) if now.duration_since(at) < self.min_unknown_kid_interval => false,
            _ => {
                *last = Some(now);
                true
            }
        }
    }

    /// Refreshes every `period` until the task is aborted.
    pub fn spawn_periodic_refresh(
        self: Arc<Self>,
        period: Duration,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if let Err(error) = self.refresh().await {
                    tracing::warn!(%error, "periodic JWKS refresh failed; the last keys stay");
                }
            }
        })
    }
}

async fn read(source: &JwksSource, client: &reqwest::Client) -> Result<KeySet, JwksError> {
    let source_name = source.to_string();
    let bytes = match source {
        JwksSource::File(path) => tokio::fs::read(path)
            .await
            .map_err(|error| JwksError::Read {
                source_name: source_name.clone(),
                error,
            })?,
        JwksSource::Url(url) => fetch(client, url).await.map_err(|error| JwksError::Fetch {
            source_name: source_name.clone(),
            error,
        })?,
    };
    let keys = KeySet::parse(&bytes).map_err(|error| JwksError::Parse {
        source_name: source_name.clone(),
        error,
    })?;
    if keys.is_empty() {
        return Err(JwksError::NoKeys { source_name });
    }
    Ok(keys)
}

async fn fetch(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, String> {
    let mut response = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|error| error.to_string())?;
    if !response.status().is_success() {
        return Err(format!("answered {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|error| error.to_string())? {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(format!("the document is over {MAX_JWKS_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_urls_or_files() {
        assert_eq!(
            JwksSource::parse("https://idp.example/jwks"),
            JwksSource::Url("https://idp.example/jwks".into())
        );
        assert_eq!(
            JwksSource::parse("keys/jwks.json"),
            JwksSource::File("keys/jwks.json".into())
        );
    }

    /// Unknown kids refresh the keys at most once per interval.
    #[tokio::test]
    async fn unknown_kids_refresh_at_most_once_per_interval() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("jwks.json");
        std::fs::write(
            &path,
            r#"{"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "a", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#,
        )
        .expect("written");
        let cache = JwksCache::load(JwksSource::File(path.clone()))
            .await
            .expect("loaded");
        let start = Instant::now();
        assert!(cache.may_refresh_for_unknown_kid(start));
        assert!(!cache.may_refresh_for_unknown_kid(start + Duration::from_secs(59)));
        assert!(cache.may_refresh_for_unknown_kid(start + UNKNOWN_KID_REFRESH));
        // A broken document keeps the last good keys.
        std::fs::write(&path, "not json").expect("written");
        assert!(cache.refresh().await.is_err());
        assert!(cache.keys().has_kid("a"));
        assert!(matches!(
            JwksCache::load(JwksSource::File(dir.path().join("none.json"))).await,
            Err(JwksError::Read { .. })
        ));
    }
}
