//! `colloquy policy-manager serve`: the policy manager alone (template directory, watcher,
//! REST API and change feed), and the template set-up of `colloquy serve`: an embedded
//! policy manager over a directory, or a mirror following a remote one.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use colloquy_policy::live::RolloutMode;
use colloquy_policy::watcher::{self, DirectoryWatcher};
use colloquy_policy::{Catalog, LiveCatalog, PolicyClient, TemplateCompiler};
use colloquy_server::policy::{self, PolicyState, Reads, Writes};
use colloquy_server::rollout::{Rollouts, ShadowSettings};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Where `colloquy policy-manager serve` listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7710";
/// Environment variable read for the admin token when `--admin-token` is not given (keeps
/// the secret out of `ps`).
pub const ADMIN_TOKEN_ENV: &str = "COLLOQUY_ADMIN_TOKEN";
/// Subdirectory of the data directory where a remote engine mirrors its policy manager's
/// templates, so it starts with its last catalog even while the manager is down.
pub const MIRROR_DIR: &str = "policy-mirror";

/// `colloquy policy-manager …`.
#[derive(Debug, Subcommand)]
pub enum PolicyManagerCommand {
    /// Serve a template directory: compile it, watch it, reload it on every change, and
    /// serve templates, uploads and the change feed remote engines follow.
    Serve(PolicyManagerArgs),
}

/// Options of `colloquy policy-manager serve`.
#[derive(Debug, Args)]
pub struct PolicyManagerArgs {
    /// Template directory [default: ./templates, else the source tree's templates/].
    #[arg(long, value_name = "DIR")]
    templates: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Bearer token allowing `PUT` and `DELETE /v1/templates/{name}` [default: $COLLOQUY_ADMIN_TOKEN;
    /// without either, uploads are disabled].
    #[arg(long, value_name = "TOKEN")]
    admin_token: Option<String>,
    /// The longest hook budget (`spec.hooks.limits.timeout_ms`) a template may ask for;
    /// templates over it are refused. At most 60000.
    #[arg(long, value_name = "MS", default_value_t = colloquy_policy::compiler::DEFAULT_MAX_HOOK_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    max_hook_timeout_ms: u64,
    /// Keep every revision and the history of activations in this store's revision archive
    /// (`sqlite:PATH`, `redis://HOST:PORT`, `postgres://USER@HOST:PORT/DB`), so rollbacks and
    /// the history survive a restart.
    /// A SQLite file is one process's: give the manager its own.
    #[arg(long, value_name = "STORE")]
    store: Option<String>,
}

/// The admin token from the flag or the environment.
pub fn admin_token(flag: Option<String>) -> Option<String> {
    flag.or_else(|| std::env::var(ADMIN_TOKEN_ENV).ok())
        .filter(|token| !token.is_empty())
}

/// Runs the standalone policy manager until Ctrl-C.
pub async fn run(command: PolicyManagerCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    let PolicyManagerCommand::Serve(args) = command;
    let dir = args.templates.unwrap_or_else(crate::default_templates_dir);
    let compiler = TemplateCompiler::new().with_max_hook_timeout_ms(args.max_hook_timeout_ms);
    let mut live = LiveCatalog::new(&dir).with_compiler(compiler);
    if let Some(spec) = &args.store {
        let store = colloquy_store::open(spec).await.with_context(|| {
            format!(
                "opening the store `{}`",
                colloquy_store::redact(spec.as_str())
            )
        })?;
        let (sources, history) = colloquy_server::rollout::archive::load(&*store)
            .await
            .with_context(|| {
                format!(
                    "reading the revision archive of `{}`",
                    colloquy_store::redact(spec.as_str())
                )
            })?;
        live = live
            .with_archive(colloquy_server::rollout::archive::StoreArchive::start(
                store,
            ))
            .seed(sources, history);
    }
    let live = Arc::new(open(live)?);
    let _watcher = watch_dir(&live)?;
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let token = admin_token(args.admin_token);
    let uploads = token.is_some();
    let manager = policy::launch(live.clone(), listener, token)?;
    writeln!(
        out,
        "colloquy policy manager listening on {}",
        manager.url()
    )?;
    list(out, &dir.display(), &live)?;
    if !uploads {
        tracing::warn!("no --admin-token: template uploads and deletions are disabled");
    }
    out.flush()?;
    let signal = crate::shutdown_signal()
        .await
        .context("waiting for SIGINT or SIGTERM")?;
    tracing::info!(signal, "shutting down");
    crate::shut_down_unless_told_again(manager.shutdown()).await
}

fn open(live: LiveCatalog) -> anyhow::Result<LiveCatalog> {
    live.reload()
        .map_err(|diagnostics| anyhow::anyhow!("{diagnostics}"))
        .with_context(|| format!("compiling the templates in {}", live.dir().display()))?;
    Ok(live)
}

fn watch_dir(live: &Arc<LiveCatalog>) -> anyhow::Result<DirectoryWatcher> {
    watcher::watch(live.clone()).with_context(|| format!("watching {}", live.dir().display()))
}

fn list(
    out: &mut dyn Write,
    from: &dyn std::fmt::Display,
    live: &LiveCatalog,
) -> anyhow::Result<()> {
    let snapshot = live.snapshot();
    writeln!(
        out,
        "templates from {from} (catalog {}):",
        snapshot.revision
    )?;
    for template in snapshot.summaries() {
        writeln!(out, "  {:<24} {}", template.name, template.revision)?;
    }
    Ok(())
}

/// Where `colloquy serve` gets its templates, kept alive while it serves.
pub struct ServeTemplates {
    /// The live catalog the engine reads.
    pub live: Arc<LiveCatalog>,
    /// The policy routes merged into the service.
    pub routes: axum::Router,
    /// Flip to `true` before shutting the service down: ends the change feeds.
    pub closing: watch::Sender<bool>,
    /// The engine's rollouts: shadow twins and canary tallies, fed by the store's commits.
    pub rollouts: Arc<Rollouts>,
    _watcher: Option<DirectoryWatcher>,
    _follower: Option<tokio::task::JoinHandle<()>>,
}

impl ServeTemplates {
    /// The templates loaded now, as a fixed catalog (what `launch` takes; the live catalog
    /// is what serves).
    pub fn catalog(&self) -> Catalog {
        Catalog::new(self.live.snapshot().catalog.templates())
    }
}

impl Drop for ServeTemplates {
    fn drop(&mut self) {
        if let Some(follower) = &self._follower {
            follower.abort();
        }
    }
}

/// How `colloquy serve` sets up its templates.
pub struct TemplateOptions {
    /// The template directory (embedded policy manager).
    pub dir: Option<PathBuf>,
    /// The policy manager to follow instead.
    pub remote: Option<String>,
    /// The admin's token, for template writes.
    pub admin_token: Option<String>,
    /// Who may read the policy routes.
    pub reads: Reads,
    /// Who the tokens name, so an agent's token on a template write is told 403.
    pub identity: Option<Arc<colloquy_server::Identity>>,
    /// Where the mirror of a remote policy manager lives.
    pub data_dir: PathBuf,
    /// The hook runtime revisions are checked against.
    pub hooks: Option<Arc<colloquy_hooks::HookRuntime>>,
    /// What an edited template file does.
    pub rollout: RolloutMode,
    /// How candidates are shadowed.
    pub shadow: ShadowSettings,
    /// The store's revision archive, and what it held at start-up.
    pub archive: Option<ArchiveSeed>,
    /// The conversation store, which the admin's replays read.
    pub store: Option<Arc<dyn colloquy_core::store::ConversationStore>>,
}

/// The store's revision archive and what it held at start-up.
pub struct ArchiveSeed {
    /// Where new revisions and activations are written.
    pub archive: Arc<dyn colloquy_policy::live::Archive>,
    /// The revisions it kept.
    pub sources: Vec<colloquy_policy::live::rollout::ArchivedSource>,
    /// The history it kept.
    pub history: Vec<colloquy_protocol::rollout::Activation>,
}

impl ArchiveSeed {
    fn apply(self, live: LiveCatalog) -> LiveCatalog {
        live.with_archive(self.archive)
            .seed(self.sources, self.history)
    }
}

/// Templates of `colloquy serve`: an embedded policy manager over `dir` (watched, with its
/// API merged into the service), or, with `remote`, a mirror under `data_dir` following the
/// policy manager at that URL. `reads` says who may read the policy routes.
pub fn serve_templates(
    options: TemplateOptions,
    out: &mut dyn Write,
) -> anyhow::Result<ServeTemplates> {
    let TemplateOptions {
        dir,
        remote,
        admin_token,
        reads,
        identity,
        data_dir,
        hooks,
        rollout,
        shadow,
        archive,
        store,
    } = options;
    let archived = |live: LiveCatalog| match archive {
        Some(seed) => seed.apply(live),
        None => live,
    };
    let policy_state = |live: &Arc<LiveCatalog>, writes, closing_rx| {
        let rollouts = Rollouts::new(live.clone(), shadow.clone());
        let mut state = PolicyState::new(live.clone(), writes, reads.clone(), closing_rx)
            .with_rollouts(rollouts.clone());
        if let Some(identity) = &identity {
            state = state.with_identity(identity.clone());
        }
        if let Some(store) = &store {
            state = state.with_store(store.clone());
        }
        (policy::router(state), rollouts)
    };
    // With a hook runtime, a revision whose module does not link is refused at reload,
    // like a template that does not compile, and so is one whose hook budget is over the
    // runtime's ceiling.
    let checked = |live: LiveCatalog| match &hooks {
        Some(runtime) => {
            let ceiling = u64::try_from(runtime.max_timeout().as_millis()).unwrap_or(u64::MAX);
            live.with_compiler(TemplateCompiler::new().with_max_hook_timeout_ms(ceiling))
                .with_check(colloquy_hooks::hook_check(runtime.clone()))
        }
        None => live,
    };
    let (closing, closing_rx) = watch::channel(false);
    match remote {
        None => {
            let dir = dir.unwrap_or_else(crate::default_templates_dir);
            let live = archived(checked(LiveCatalog::new(&dir)).with_rollout(rollout));
            // At start-up nothing serves yet: wait for the hooks to compile, so the service
            // starts with every template (and a refused hook stops it, as a broken file does).
            live.reload_settled()
                .map_err(|diagnostics| anyhow::anyhow!("{diagnostics}"))
                .with_context(|| format!("compiling the templates in {}", dir.display()))?;
            let live = Arc::new(live);
            if live.snapshot().catalog.names().is_empty() {
                anyhow::bail!("no templates in {}", dir.display());
            }
            let watcher = watch_dir(&live)?;
            list(out, &dir.display(), &live)?;
            // One administrator: with an identity that names one (an admin token in it, or
            // an admin claim of JWTs), that identity decides every write as every read.
            let writes = match (&identity, admin_token) {
                (Some(identity), _) if identity.has_admin() => Writes::Identity(identity.clone()),
                (_, token) => token.map_or(Writes::Disabled, Writes::AdminToken),
            };
            let (routes, rollouts) = policy_state(&live, writes, closing_rx);
            Ok(ServeTemplates {
                live,
                routes,
                closing,
                rollouts,
                _watcher: Some(watcher),
                _follower: None,
            })
        }
        Some(url) => {
            if dir.is_some() {
                anyhow::bail!("--templates and --policy-manager exclude each other");
            }
            let client = PolicyClient::new(&url)?;
            let mirror = data_dir.join(MIRROR_DIR);
            std::fs::create_dir_all(&mirror)
                .with_context(|| format!("creating the template mirror {}", mirror.display()))?;
            let live = archived(checked(LiveCatalog::new(&mirror)).with_origin(url.clone()));
            // The mirror of an earlier run serves until the manager answers (once its hooks
            // compiled); a broken one is reported in /v1/status and replaced at the first
            // sync.
            let _ = live.reload_settled();
            let live = Arc::new(live);
            list(
                out,
                &format!("{url} (mirrored in {})", mirror.display()),
                &live,
            )?;
            let follower = colloquy_policy::follower::follow(live.clone(), client);
            let (routes, rollouts) = policy_state(&live, Writes::Follower(url), closing_rx);
            Ok(ServeTemplates {
                live,
                routes,
                closing,
                rollouts,
                _watcher: None,
                _follower: Some(follower),
            })
        }
    }
}
