//! `colloquy serve`: the HTTP API over a template directory, with the configured store
//! (SQLite under the data directory by default) and the deadline scheduler, until Ctrl-C.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use colloquy_core::EngineConfig;
use colloquy_core::hook_pool::HookPoolConfig;
use colloquy_hooks::{HookRuntime, HookRuntimeConfig};
use colloquy_server::auth::AgentsFile;
use colloquy_server::policy::Reads;
use colloquy_server::rollout::ShadowSettings;
use colloquy_server::trace_export;
use colloquy_server::{self as api, Identity, ServiceOptions};
use tokio::net::TcpListener;

/// Where `colloquy serve` listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7700";

/// Options of `colloquy serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Template directory [default: ./templates, else the source tree's templates/].
    #[arg(long, value_name = "DIR")]
    templates: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// YAML file of agent ids, bearer tokens, webhooks, A2A agents and the admin token.
    /// Without it the server runs in open development mode (`X-Agent-Id` names the caller).
    #[arg(long, value_name = "FILE")]
    agents: Option<PathBuf>,
    /// The JWKS of an identity provider (a file, or its `jwks_uri`, http or https): a bearer
    /// JWT signed by one of its keys (RS256, PS256, ES256, EdDSA) names an agent, beside or
    /// instead of the agents file's tokens. The keys are read again when a token names an
    /// unknown `kid` (at most once a minute) and every 10 minutes. Needs --auth-issuer and
    /// --auth-audience (docs/security.md).
    #[arg(long, value_name = "FILE|URL", requires_all = ["auth_issuer", "auth_audience"])]
    auth_jwks: Option<String>,
    /// The `iss` every JWT must carry (the provider's issuer URL).
    #[arg(long, value_name = "ISS", requires = "auth_jwks")]
    auth_issuer: Option<String>,
    /// The audience a JWT's `aud` must be, or contain.
    #[arg(long, value_name = "AUD", requires = "auth_jwks")]
    auth_audience: Option<String>,
    /// The JWT claim whose value is the agent id.
    #[arg(long, value_name = "CLAIM", default_value = "sub")]
    auth_agent_claim: String,
    /// A JWT whose claim NAME is VALUE (or an array containing VALUE) is the administrator's,
    /// e.g. `role=admin`: it reads everything and changes templates, as the admin token.
    #[arg(long, value_name = "NAME=VALUE", requires = "auth_jwks", value_parser = parse_claim)]
    auth_admin_claim: Option<(String, String)>,
    /// Where conversations live: `sqlite:PATH` (one file, survives restarts), `redis://HOST:PORT`
    /// or `postgres://USER@HOST:PORT/DB[?sslmode=MODE&sslrootcert=CA.pem]` (password from
    /// PGPASSWORD or the file named by COLLOQUY_PG_PASSWORD_FILE; TLS as libpq's sslmode;
    /// shared by several `colloquy serve` nodes) or `memory` (lost at exit)
    /// [default: sqlite:DATA_DIR/colloquy.db].
    #[arg(long, value_name = "STORE")]
    store: Option<String>,
    /// Directory of the default SQLite store.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    /// Follow the policy manager at this URL (its change feed) instead of serving a template
    /// directory; its templates are mirrored under DATA_DIR/policy-mirror.
    #[arg(long, value_name = "URL", conflicts_with = "templates")]
    policy_manager: Option<String>,
    /// The administrator's bearer token: template uploads and deletions through the embedded
    /// policy manager, and reading everything [default: $COLLOQUY_ADMIN_TOKEN, or the agents
    /// file's `admin_token`; without any, uploads are disabled].
    #[arg(long, value_name = "TOKEN")]
    admin_token: Option<String>,
    /// What an edited template file (or an upload) does: `immediate` serves it at once;
    /// `shadow` stages it as the template's candidate, shadowed beside the active revision
    /// until promoted (`colloquy templates promote`).
    #[arg(long, value_name = "MODE", value_enum, default_value = "immediate")]
    rollout: Rollout,
    /// With --agents, let anyone read the policy routes (`GET /v1/templates…`, `/v1/watch`,
    /// `/v1/status`), template sources and hook modules included. Without it they need a
    /// token: any agent's, or the admin's for sources and modules. (Without --agents
    /// everything is open anyway.)
    #[arg(long)]
    public_templates: bool,
    /// How long a completed conversation stays readable before it is removed with its
    /// event log (the messages in agents' inboxes stay, see --inbox-ttl): a number and a
    /// unit, `ms`, `s`, `m`, `h` or `d`, e.g. `90s`, `7d`. The store holds every
    /// conversation completed within this window.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    retention: Duration,
    /// How long a message waits in an agent's inbox for the agent to acknowledge it before
    /// it is dropped unread, counted from when it was sent (same format as --retention).
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = parse_inbox_ttl)]
    inbox_ttl: Duration,
    /// The longest hook budget (`spec.hooks.limits.timeout_ms`) a template may ask for:
    /// templates over it are refused when they load, and no hook call runs longer. At most
    /// 60000.
    #[arg(long, value_name = "MS", default_value_t = colloquy_policy::compiler::DEFAULT_MAX_HOOK_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    max_hook_timeout_ms: u64,
    /// Threads that run the steps of conversations whose template has a hook; one template
    /// may hold half of them [default: 4 per core].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    hook_threads: Option<u16>,
    /// The template an A2A client's task starts when its message names none in
    /// `metadata.colloquy.template` (e.g. `a2a-task`, whose participants may ask for more
    /// input).
    #[arg(long, value_name = "NAME", default_value = colloquy_server::a2a::inward::DEFAULT_TEMPLATE)]
    a2a_template: String,
    /// Let A2A push notifications go to loopback, private and link-local addresses. Off by
    /// default: a client's webhook URL must not reach into the engine's own network (SSRF).
    /// For development and tests on one machine.
    #[arg(long)]
    a2a_push_allow_private: bool,
    /// Sign the A2A v1.0 agent cards (JWS over the RFC 8785 canonical card) with this
    /// PKCS#8 private key, Ed25519 or P-256, PEM or DER. Its public key is logged at start
    /// as a JWK, for those who verify.
    #[arg(long, value_name = "FILE", requires = "a2a_card_key_id")]
    a2a_card_key: Option<PathBuf>,
    /// The key id (`kid`) the card signatures name.
    #[arg(long, value_name = "KID", requires = "a2a_card_key")]
    a2a_card_key_id: Option<String>,
    /// A JWKS file (`{"keys": [JWK, …]}`, Ed25519 or P-256 keys with a `kid`): remote A2A
    /// agents' cards must be signed by one of these keys to be believed; a card that does
    /// not verify is ignored (the agent is spoken to in v0.3). `jku` is never fetched.
    #[arg(long, value_name = "FILE")]
    a2a_trust_store: Option<PathBuf>,
    /// Sign audit records (`GET /v1/conversations/{id}/audit`) with this PKCS#8 private key,
    /// Ed25519 or P-256, PEM or DER (`colloquy audit keygen` makes one): the engine's
    /// signature over a record's chain head and time, and over each message the engine sends
    /// itself. Its public key is served at
    /// `/v1/audit/keys` for `colloquy audit verify --jwks`.
    #[arg(long, value_name = "FILE")]
    audit_key: Option<PathBuf>,
    /// The key id (`kid`) audit signatures name [default: `colloquy-audit`].
    #[arg(
        long,
        value_name = "KID",
        requires = "audit_key",
        default_value = "colloquy-audit"
    )]
    audit_key_id: String,
    /// Serve no MCP endpoint (`/mcp`, for LLM agents through MCP clients).
    #[arg(long)]
    no_mcp: bool,
    /// `Host` values `/mcp` accepts (a name, or `name:port`), comma-separated: the defence
    /// against DNS rebinding. Behind a real host name, name it [default: localhost,
    /// 127.0.0.1 and ::1, or the --listen address when it is neither loopback nor 0.0.0.0].
    #[arg(
        long,
        value_name = "HOSTS",
        value_delimiter = ',',
        conflicts_with = "no_mcp"
    )]
    mcp_allowed_hosts: Option<Vec<String>>,
    /// Browser `Origin`s `/mcp` accepts (`scheme://host[:port|:*]`), comma-separated; a
    /// request from any other origin is refused (one without an `Origin`, not from a
    /// browser, passes) [default: `http://` and each allowed host, on any port].
    #[arg(
        long,
        value_name = "ORIGINS",
        value_delimiter = ',',
        conflicts_with = "no_mcp"
    )]
    mcp_allowed_origins: Option<Vec<String>>,
    /// Export traces (OpenTelemetry, OTLP over HTTP) to this collector: its base URL, e.g.
    /// `http://localhost:4318`, to which `/v1/traces` is added, or its full traces URL. Off
    /// by default, and then traces cost nothing (docs/observability.md).
    #[arg(long, value_name = "URL", value_parser = trace_export::traces_url)]
    otlp_endpoint: Option<String>,
    /// How exported spans are encoded: `http/protobuf` or `http/json`.
    #[arg(
        long,
        value_name = "PROTOCOL",
        default_value = "http/protobuf",
        requires = "otlp_endpoint"
    )]
    otlp_protocol: trace_export::OtlpProtocol,
    /// The share of new traces exported, from 0 to 1. A request that carries a W3C
    /// `traceparent` follows its caller's sampling decision instead.
    #[arg(long, value_name = "RATIO", default_value = "1", requires = "otlp_endpoint", value_parser = trace_export::parse_sample_ratio)]
    trace_sample: f64,
    /// Share a Postgres store's conversations with other `colloquy serve` nodes by
    /// partition: each conversation is served by the node holding its partition's lease,
    /// and any node forwards its requests there. FILE holds the secret every node of the
    /// deployment shares (it marks requests forwarded between them). See docs/scale.md.
    #[arg(long, value_name = "FILE")]
    cluster_secret_file: Option<PathBuf>,
    /// The URL the other nodes reach this one at [default: `http://` and the --listen
    /// address, which must then not be 0.0.0.0].
    #[arg(long, value_name = "URL", requires = "cluster_secret_file")]
    cluster_advertise: Option<String>,
    /// How long a partition lease lasts unless renewed: a node that dies hands its
    /// conversations over after it (renewed every third of it; ticks every tenth).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, requires = "cluster_secret_file")]
    cluster_lease_ttl: Duration,
}

impl ServeArgs {
    /// How traces are exported, when --otlp-endpoint asks for it.
    pub fn trace_export(&self) -> Option<trace_export::TraceExport> {
        Some(trace_export::TraceExport {
            endpoint: self.otlp_endpoint.clone()?,
            protocol: self.otlp_protocol,
            sample_ratio: self.trace_sample,
        })
    }

    /// The MCP endpoint's settings: none under --no-mcp, else the flags over the defaults
    /// of --listen.
    fn mcp(&self) -> Option<colloquy_server::mcp::McpSettings> {
        if self.no_mcp {
            return None;
        }
        let mut settings = match &self.mcp_allowed_hosts {
            Some(hosts) => colloquy_server::mcp::McpSettings::for_hosts(hosts.clone()),
            None => colloquy_server::mcp::McpSettings::for_listen(self.listen),
        };
        if let Some(origins) = &self.mcp_allowed_origins {
            settings.allowed_origins = origins.clone();
        }
        Some(settings)
    }
}

/// `NAME=VALUE` of --auth-admin-claim.
fn parse_claim(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() && !value.is_empty() => {
            Ok((name.to_owned(), value.to_owned()))
        }
        _ => Err(format!("`{text}` is not NAME=VALUE, e.g. role=admin")),
    }
}

/// The JWT verifier the --auth-* flags describe, its keys read once (a start fails when
/// they cannot be).
async fn jwt_auth(args: &ServeArgs) -> anyhow::Result<Option<Arc<colloquy_server::auth::JwtAuth>>> {
    use colloquy_server::auth::{JwtAuth, jwks, jwt};
    let (Some(spec), Some(issuer), Some(audience)) =
        (&args.auth_jwks, &args.auth_issuer, &args.auth_audience)
    else {
        return Ok(None);
    };
    let keys = jwks::JwksCache::load(jwks::JwksSource::parse(spec)).await?;
    let expect = jwt::Expectations {
        issuer: issuer.clone(),
        audience: audience.clone(),
        agent_claim: args.auth_agent_claim.clone(),
        admin_claim: args.auth_admin_claim.clone(),
        leeway_s: jwt::LEEWAY_S,
    };
    Ok(Some(Arc::new(JwtAuth::new(expect, Arc::new(keys)))))
}

/// An inbox TTL: a duration, not zero (which would read as "no limit" but drop every
/// message at the next sweep).
fn parse_inbox_ttl(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        Duration::ZERO => Err(
            "an inbox TTL of 0 would drop every message at the next sweep; for an agent that \
             should have no inbox, give it `inbox: false` in the agents file"
                .to_owned(),
        ),
        ttl => Ok(ttl),
    }
}

/// Parses `90s`, `5m`, `250ms`, `2h`, `7d` (a whole number and a unit).
/// This node's part in ownership, from the --cluster-* flags: its id (its address and a
/// fresh UUID, so a restarted process is a new incarnation whose predecessor's commits can
/// never pass as its own), the shared secret, and lease timings.
fn cluster_settings(
    secret_file: &std::path::Path,
    advertise: Option<&str>,
    lease_ttl: Duration,
    addr: std::net::SocketAddr,
    (leases, partitions): (Arc<dyn colloquy_cluster::LeaseStore>, u32),
) -> anyhow::Result<colloquy_server::ownership::OwnershipSettings> {
    let secret = std::fs::read_to_string(secret_file)
        .with_context(|| format!("--cluster-secret-file {}", secret_file.display()))?;
    let secret = secret.trim();
    if secret.len() < 16 {
        anyhow::bail!(
            "--cluster-secret-file {}: the node secret is shorter than 16 characters",
            secret_file.display()
        );
    }
    let address = match advertise {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None if addr.ip().is_unspecified() => anyhow::bail!(
            "--listen {addr} is every interface: say with --cluster-advertise where the other \
             nodes reach this one"
        ),
        None => format!("http://{addr}"),
    };
    let ttl_ms = u64::try_from(lease_ttl.as_millis()).unwrap_or(u64::MAX);
    let config = colloquy_cluster::OwnershipConfig {
        partitions,
        lease_ttl_ms: ttl_ms,
        tick_ms: (ttl_ms / 10).max(50),
        safety_margin_ms: (ttl_ms / 20).min(colloquy_cluster::config::SAFETY_MARGIN_MS),
        // A dead node's partitions are taken in a few ticks, not 1024/64 of them: the two
        // nodes of the durability test measured TTL + 1.4 s at 64 and TTL + 0.2-0.3 s here.
        max_moves_per_tick: 256,
        ..colloquy_cluster::OwnershipConfig::default()
    };
    config
        .validate()
        .map_err(|why| anyhow::anyhow!("--cluster-lease-ttl {ttl_ms} ms: {why}"))?;
    Ok(colloquy_server::ownership::OwnershipSettings {
        leases,
        node: colloquy_cluster::NodeId::new(format!(
            "{address}/{}",
            colloquy_core::engine::new_id()
        )),
        address: Some(address),
        secret: Arc::from(secret),
        config,
    })
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit; write e.g. `90s`, `5m` or `7d`"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a whole number"))?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => return Err(format!("unknown unit `{other}`; use ms, s, m, h or d")),
    };
    number
        .checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("`{text}` is too long"))
}

/// The AOT cache of compiled hook modules, inside the data directory.
const HOOK_CACHE_DIR: &str = "hook-cache";

/// Where the default SQLite store lives unless `--data-dir` says otherwise.
pub const DEFAULT_DATA_DIR: &str = "./data";
/// The default store's file name inside the data directory.
pub const DATABASE_FILE: &str = "colloquy.db";

/// The `--store` spec to open, and how to describe it at start-up.
fn store_spec(store: Option<String>, data_dir: &std::path::Path) -> (String, String) {
    let spec =
        store.unwrap_or_else(|| format!("sqlite:{}", data_dir.join(DATABASE_FILE).display()));
    let description = if spec == "memory" {
        "memory (conversations are lost at exit)".to_owned()
    } else if let Some(path) = spec.strip_prefix("sqlite:") {
        format!("sqlite {path}")
    } else if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        // The store's own redaction: never the password, also when the URL holds one.
        match colloquy_store::postgres::Locator::parse(&spec) {
            Ok(locator) => format!("postgres {}", locator.redacted()),
            Err(_) => "postgres (a URL that does not parse; see the error below)".to_owned(),
        }
    } else {
        // A Redis URL may carry a password: show where, not how.
        let host = spec
            .rsplit_once('@')
            .map(|(_, host)| host)
            .or_else(|| spec.split_once("://").map(|(_, host)| host))
            .unwrap_or(&spec);
        format!("redis {host}")
    };
    (spec, description)
}

/// The one admin token of the server: `--admin-token` (or `$COLLOQUY_ADMIN_TOKEN`) and the
/// agents file's `admin_token` name the same administrator, who reads everything (with an
/// agents file) and changes templates. Either may be given alone; two different ones are
/// refused rather than one of them silently ignored.
fn one_admin_token(
    flag: Option<String>,
    agents_file: Option<String>,
) -> anyhow::Result<Option<String>> {
    match (flag, agents_file) {
        (Some(flag), Some(file)) if flag != file => anyhow::bail!(
            "--admin-token (or ${}) and the agents file's admin_token differ: give one, \
             or the same token in both",
            crate::policy_manager::ADMIN_TOKEN_ENV
        ),
        (flag, file) => Ok(flag.or(file)),
    }
}

/// Who may read the policy routes: with an agents file, callers with a token unless the
/// operator made templates public; in open development mode, anyone (as everything else).
fn policy_reads(identity: &Identity, public_templates: bool) -> Reads {
    match identity {
        Identity::Tokens { .. } if !public_templates => Reads::Tokens(Arc::new(identity.clone())),
        _ => Reads::Public,
    }
}

/// `--rollout`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Rollout {
    Immediate,
    Shadow,
}

impl From<Rollout> for colloquy_policy::live::RolloutMode {
    fn from(rollout: Rollout) -> Self {
        match rollout {
            Rollout::Immediate => colloquy_policy::live::RolloutMode::Immediate,
            Rollout::Shadow => colloquy_policy::live::RolloutMode::Shadow,
        }
    }
}

/// Runs the service until Ctrl-C, then lets requests in flight finish.
pub async fn run(args: ServeArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mcp = args.mcp();
    let jwt = jwt_auth(&args).await?;
    let agents = args.agents.as_deref().map(AgentsFile::read).transpose()?;
    let admin_token = one_admin_token(
        crate::policy_manager::admin_token(args.admin_token),
        agents.as_ref().and_then(|file| file.admin_token.clone()),
    )?;
    let identity = match (agents, args.agents.as_deref()) {
        (Some(mut file), Some(path)) => {
            file.admin_token.clone_from(&admin_token);
            Identity::from_checked(file, &path.display().to_string())?
        }
        // JWTs alone: the admin token, if any, is the one static credential.
        _ if jwt.is_some() => Identity::from_checked(
            AgentsFile {
                admin_token: admin_token.clone(),
                agents: Vec::new(),
            },
            "--admin-token",
        )?,
        _ => Identity::Open,
    };
    let identity = match &jwt {
        Some(jwt) => identity.with_jwt(jwt.clone()),
        None => identity,
    };
    let reads = policy_reads(&identity, args.public_templates);
    let (spec, store_description) = store_spec(args.store, &args.data_dir);
    let opening = || {
        format!(
            "opening the store `{}`",
            colloquy_store::redact(spec.as_str())
        )
    };
    // With --cluster-secret-file the Postgres store is the lease table too.
    let (store, leases): (Arc<dyn colloquy_core::store::ConversationStore>, _) =
        match &args.cluster_secret_file {
            None => (
                colloquy_store::open(&spec).await.with_context(opening)?,
                None,
            ),
            Some(_) if !spec.starts_with("postgres") => anyhow::bail!(
                "--cluster-secret-file needs a Postgres store (--store postgres://…), which \
                 keeps the partition leases; on Redis every node follows every commit instead"
            ),
            Some(_) => {
                let postgres = Arc::new(
                    colloquy_store::PostgresStore::connect(&spec)
                        .await
                        .with_context(opening)?,
                );
                let partitions = postgres.partitions().await.with_context(opening)?;
                let leases: Arc<dyn colloquy_cluster::LeaseStore> = postgres.clone();
                (postgres, Some((leases, partitions)))
            }
        };
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr()?;
    writeln!(out, "colloquy listening on http://{addr}")?;
    let ownership = match (leases, &args.cluster_secret_file) {
        (Some((leases, partitions)), Some(secret_file)) => {
            let settings = cluster_settings(
                secret_file,
                args.cluster_advertise.as_deref(),
                args.cluster_lease_ttl,
                addr,
                (leases, partitions),
            )?;
            writeln!(
                out,
                "ownership: node {}, {} partitions, leases of {:?}",
                settings.node, partitions, args.cluster_lease_ttl
            )?;
            Some(settings)
        }
        _ => None,
    };
    let hooks = Arc::new(
        HookRuntime::new(HookRuntimeConfig {
            cache_dir: Some(args.data_dir.join(HOOK_CACHE_DIR)),
            max_timeout: Duration::from_millis(args.max_hook_timeout_ms),
            pool: args
                .hook_threads
                .map_or_else(HookPoolConfig::default, |threads| {
                    HookPoolConfig::with_threads(usize::from(threads))
                }),
            ..HookRuntimeConfig::default()
        })
        .context("starting the wasm hook runtime")?,
    );
    let shadow = ShadowSettings {
        off: (spec.starts_with("redis") || spec.starts_with("postgres")).then(|| {
            "several engine nodes may share this store, and a twin must see all of its \
             conversation: shadowing runs on a store one node owns (memory, SQLite)"
                .to_owned()
        }),
        ..ShadowSettings::default()
    };
    // The revisions and history the store kept: rollback and pinned conversations after a
    // restart read them.
    let (sources, history) = colloquy_server::rollout::archive::load(&*store)
        .await
        .with_context(|| {
            format!(
                "reading the revision archive of `{}`",
                colloquy_store::redact(spec.as_str())
            )
        })?;
    let archive = crate::policy_manager::ArchiveSeed {
        archive: colloquy_server::rollout::archive::StoreArchive::start(store.clone()),
        sources,
        history,
    };
    let token_identity =
        matches!(identity, Identity::Tokens { .. }).then(|| Arc::new(identity.clone()));
    let templates = crate::policy_manager::serve_templates(
        crate::policy_manager::TemplateOptions {
            dir: args.templates,
            remote: args.policy_manager,
            admin_token,
            reads,
            identity: token_identity,
            data_dir: args.data_dir.clone(),
            hooks: Some(hooks.clone()),
            rollout: args.rollout.into(),
            shadow,
            archive: Some(archive),
            store: Some(store.clone()),
        },
        out,
    )?;
    if let Some(jwt) = &jwt {
        writeln!(
            out,
            "JWTs of {} (keys from {})",
            jwt.issuer(),
            jwt.jwks().source()
        )?;
    }
    match &args.agents {
        Some(path) => writeln!(out, "agents from {}", path.display())?,
        None if jwt.is_some() => {}
        None => tracing::warn!(
            "no --agents file: open development mode, any caller may act as any agent by \
             naming it in the X-Agent-Id header"
        ),
    }
    writeln!(out, "store: {store_description}")?;
    out.flush()?;
    let card_signer = match (&args.a2a_card_key, &args.a2a_card_key_id) {
        (Some(path), Some(kid)) => {
            let signer = colloquy_a2a::signing::CardSigner::from_file(path, kid)
                .map_err(anyhow::Error::msg)?;
            tracing::info!(jwk = %signer.public_jwk(), "A2A agent cards are signed; verify with this key");
            Some(std::sync::Arc::new(signer))
        }
        _ => None,
    };
    let trust_store = match &args.a2a_trust_store {
        Some(path) => Some(std::sync::Arc::new(
            colloquy_a2a::signing::TrustStore::from_file(path).map_err(anyhow::Error::msg)?,
        )),
        None => None,
    };
    let audit_key = match &args.audit_key {
        Some(path) => {
            let signer = colloquy_trust::jws::Signer::from_file(path, &args.audit_key_id)
                .map_err(|why| anyhow::anyhow!("--audit-key: {why}"))?;
            tracing::info!(jwk = %signer.public_jwk(), "audit records are signed; verify with this key");
            Some(std::sync::Arc::new(signer))
        }
        None => None,
    };
    let options = ServiceOptions {
        identity,
        ownership,
        audit_key: audit_key.clone(),
        store: Some(store),
        commit_observer: Some(templates.rollouts.clone()),
        templates: Some(templates.live.clone()),
        routes: Some(templates.routes.clone()),
        mcp,
        hooks: Some(hooks),
        a2a: colloquy_server::a2a::Settings {
            template: args.a2a_template.clone(),
            push_allow_private: args.a2a_push_allow_private,
            card_signer,
            trust_store,
        },
        engine: EngineConfig {
            retention_ms: u64::try_from(args.retention.as_millis()).unwrap_or(u64::MAX),
            inbox_ttl_ms: u64::try_from(args.inbox_ttl.as_millis()).unwrap_or(u64::MAX),
            // The audit key also signs the messages the engine sends itself.
            message_signer: audit_key,
            ..EngineConfig::default()
        },
        ..ServiceOptions::default()
    };
    let catalog = templates.catalog();
    let service = api::launch(catalog, listener, options)?;
    let signal = crate::shutdown_signal()
        .await
        .context("waiting for SIGINT or SIGTERM")?;
    tracing::info!(signal, "shutting down");
    // Ends the template change feeds, which would otherwise hold the shutdown open.
    let _ = templates.closing.send(true);
    crate::shut_down_unless_told_again(service.shutdown()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_and_the_agents_file_name_one_admin_token() {
        let token = |text: &str| Some(text.to_owned());
        assert_eq!(one_admin_token(None, None).unwrap(), None);
        assert_eq!(one_admin_token(token("f"), None).unwrap(), token("f"));
        assert_eq!(one_admin_token(None, token("a")).unwrap(), token("a"));
        assert_eq!(one_admin_token(token("s"), token("s")).unwrap(), token("s"));
        let error = one_admin_token(token("f"), token("a")).unwrap_err();
        assert!(error.to_string().contains("differ"), "{error}");
    }

    #[test]
    fn policy_reads_need_tokens_with_an_agents_file_unless_templates_are_public() {
        let tokens =
            Identity::from_yaml("agents:\n  - id: alice\n    token: alice-token\n", "test")
                .unwrap();
        assert!(matches!(policy_reads(&tokens, false), Reads::Tokens(_)));
        assert!(matches!(policy_reads(&tokens, true), Reads::Public));
        assert!(matches!(
            policy_reads(&Identity::Open, false),
            Reads::Public
        ));
    }

    #[derive(clap::Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    fn parse(flags: &[&str]) -> Result<ServeArgs, clap::Error> {
        use clap::Parser as _;
        Serve::try_parse_from(std::iter::once("serve").chain(flags.iter().copied()))
            .map(|serve| serve.args)
    }

    #[test]
    fn the_jwt_flags_parse_and_go_together() {
        let args = parse(&[
            "--auth-jwks",
            "https://idp.example/jwks",
            "--auth-issuer",
            "https://idp.example",
            "--auth-audience",
            "colloquy",
            "--auth-admin-claim",
            "role=admin",
        ])
        .expect("parses");
        assert_eq!(args.auth_jwks.as_deref(), Some("https://idp.example/jwks"));
        assert_eq!(args.auth_issuer.as_deref(), Some("https://idp.example"));
        assert_eq!(args.auth_audience.as_deref(), Some("colloquy"));
        assert_eq!(args.auth_agent_claim, "sub", "the default");
        assert_eq!(
            args.auth_admin_claim,
            Some(("role".to_owned(), "admin".to_owned()))
        );
        let args = parse(&[
            "--auth-jwks=keys.json",
            "--auth-issuer=i",
            "--auth-audience=a",
            "--auth-agent-claim=agent_id",
        ])
        .expect("parses");
        assert_eq!(args.auth_agent_claim, "agent_id");
        // The issuer and audience are required with a JWKS, and a JWKS with them.
        assert!(parse(&["--auth-jwks", "keys.json"]).is_err());
        assert!(parse(&["--auth-jwks=k", "--auth-issuer=i"]).is_err());
        assert!(parse(&["--auth-issuer", "i"]).is_err());
        assert!(parse(&["--auth-admin-claim", "role=admin"]).is_err());
        let error = parse(&[
            "--auth-jwks=k",
            "--auth-issuer=i",
            "--auth-audience=a",
            "--auth-admin-claim=admin",
        ])
        .expect_err("no value");
        assert!(error.to_string().contains("NAME=VALUE"), "{error}");
    }

    #[test]
    fn durations_take_a_whole_number_and_a_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7_200)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_durations_say_what_is_wrong() {
        assert!(parse_duration("300").unwrap_err().contains("no unit"));
        assert!(
            parse_duration("5 weeks")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_duration("m").unwrap_err().contains("whole number"));
        assert!(parse_duration("1.5h").unwrap_err().contains("unknown unit"));
        assert!(
            parse_duration("99999999999999999999d")
                .unwrap_err()
                .contains("whole number")
        );
        assert!(
            parse_duration("999999999999999d")
                .unwrap_err()
                .contains("too long")
        );
    }

    #[test]
    fn an_inbox_ttl_is_a_duration_other_than_zero() {
        assert_eq!(parse_inbox_ttl("7d"), Ok(Duration::from_secs(604_800)));
        assert!(parse_inbox_ttl("0s").unwrap_err().contains("inbox: false"));
        assert!(parse_inbox_ttl("7").unwrap_err().contains("no unit"));
    }
}
