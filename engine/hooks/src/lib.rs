//! Colloquy's wasm hook runtime: runs a template's hook at `on_start`, `on_message` and
//! `on_timeout`; the hook is a core module (ABI v1) or a component of the hooks world
//! (`docs/hook-abi.md`). The only crate of the workspace that names wasmtime.
//!
//! One [`HookRuntime`] serves every template of an engine:
//! - one shared `wasmtime::Engine` with epoch interruption, advanced by a ticker thread
//!   while calls come (`ticker`), so each call is stopped once it has spent the template's
//!   `timeout_ms` of CPU time, or [`WALL_MARGIN`] after that in wall time (`budget`), and
//!   never later than the operator's ceiling ([`HookRuntimeConfig::max_timeout`]);
//! - the [`HookPool`] of threads the engine runs hooked conversations' steps on, so hook
//!   calls never hold the async workers (`colloquy_core::hook_pool`);
//! - the pooling instance allocator, sized by [`HookRuntimeConfig`];
//! - one `InstancePre` per module (keyed by the module's SHA-256, so a template revision
//!   with a rebuilt module gets its own, and running conversations keep the old one: that is
//!   the hot swap), linked and checked when a template first calls it, or eagerly: blocking
//!   through [`HookRuntime::prepare`], or on a background compile thread through
//!   [`HookRuntime::prepare_in_background`] (what the live catalog's reload uses, so a big
//!   component compiling for seconds holds up neither the reload nor conversations);
//! - instances reused across calls (a small idle stack per module, one instance per
//!   concurrently running call) and discarded after any failure, so a trap never leaks state
//!   into the next call;
//! - a memory cap per store from the template's `limits.memory_bytes` (all of an instance's
//!   memories together: a component may have several);
//! - an on-disk AOT cache of compiled modules, keyed by module hash and
//!   `Engine::precompile_compatibility_hash()` (`cache`).
//!
//! # Layout
//! - `host`: store data, limiter, the `colloquy:hooks/host` imports.
//! - `module`: loading, instances, calls, for both forms.
//! - `core`: ABI v1's shape check and calling convention; `component`: the world check and
//!   the component call.
//! - `cache`: AOT files; `budget` and `ticker`: how long a call may run, and the epoch ticker.
//! - `producers`: the source language a module's toolchain recorded, for trace spans.
//! - `output`: reading the answer; [`operators`]: wasm operators per call, for benchmarks.
//! - `reload_check`: [`hook_check`], a live catalog's check of each new revision's module.
//!
//! The JSON event a hook is given is built by the core (`colloquy_core::hooks::input`), and
//! call durations are counted in its [`latency`], which `/metrics` reads.
//!
//! # Dependencies
//! `colloquy-core` only (with the protocol and the policy compiler): this crate implements
//! the core's [`HookCaller`] and takes plain inputs (a compiled template, an event, the
//! event's JSON), never the engine's types. wasmtime appears in no other crate.

mod budget;
mod cache;
mod component;
mod core;
mod host;
mod module;
pub mod operators;
mod output;
mod producers;
mod reload_check;
mod ticker;

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use colloquy_policy::CompiledTemplate;
use colloquy_policy::compiled::HookModule;
use colloquy_protocol::hook::{HookInput, HookOutput};
use colloquy_protocol::template::{HookEvent, HookSpec};

pub use self::module::BinaryForm;
use self::module::{Linkers, LoadedModule};
use colloquy_core::hook_pool::{HookPool, HookPoolConfig};
pub use colloquy_core::hooks::latency;
pub use colloquy_core::hooks::{CallSite, HookCaller, HookFailure, event_name};
pub use reload_check::hook_check;

pub use budget::WALL_MARGIN;

/// Default number of hook instances alive at once (idle and running), across all modules.
/// Each reserves address space (not memory) for one linear memory in the pooling allocator.
pub const DEFAULT_MAX_INSTANCES: u32 = 256;
/// Idle instances kept per module for reuse. Calls beyond this many at once still run, on
/// instances created for them and dropped after.
pub const DEFAULT_IDLE_INSTANCES_PER_MODULE: usize = 8;
/// The longest budget a hook call gets unless the operator says otherwise, whatever its
/// template asks for (`colloquy serve --max-hook-timeout-ms`): the policy compiler refuses
/// templates above it ([`colloquy_policy::compiler::DEFAULT_MAX_HOOK_TIMEOUT_MS`]), and the
/// runtime holds every call to it, also for templates a remote policy manager compiled.
pub const DEFAULT_MAX_TIMEOUT: Duration =
    Duration::from_millis(colloquy_policy::compiler::DEFAULT_MAX_HOOK_TIMEOUT_MS);
/// How long a hook call may run when it is tried on an async worker, before the engine moves
/// its module's calls to the hook pool for good. Crossing to a pool thread and back costs a
/// message ~45 µs on the development VM (two thread wake-ups), ten times a usual hook call:
/// so a call runs where its message is handled, and only a module that once ran past this
/// slice a few times (a runaway, a slow policy) pays the crossing. An async worker is held
/// at most this long, a few times per module (`module::INLINE_OVERRUNS`, and a few times in
/// a row when the OS keeps its thread from a core: `module::STARVED_OVERRUNS`), and never
/// instantiates: a call finding no idle instance runs on the pool, which makes one
/// (`colloquy_core::hook_pool`).
pub const INLINE_SLICE: Duration = Duration::from_millis(5);
/// Largest linear memory any hook may have; templates ask for at most this much.
pub const MAX_MEMORY_BYTES: u64 = 4 * 1024 * 1024 * 1024;
/// Largest output a hook may return. Far above any real answer (a few actions), small enough
/// that a runaway hook cannot make the engine parse and store megabytes per message.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// Most table elements a hook may grow its tables to.
pub const MAX_TABLE_ELEMENTS: usize = 10_000;
/// Core instances, memories and tables one hook instance may hold. A core module holds one
/// of each; a component holds one core instance per module it is made of and per adapter
/// shim: a Python component (componentize-py 0.25) holds 38 core instances, 1 memory and 2
/// tables; a JavaScript one (componentize-qjs 0.4) 13 core instances and 3 memories.
/// wasmtime's default of 32 core instances a component would refuse the Python interpreter.
pub const MAX_CORE_INSTANCES_PER_HOOK: u32 = 64;
/// See [`MAX_CORE_INSTANCES_PER_HOOK`].
pub const MAX_MEMORIES_PER_HOOK: u32 = 4;
/// See [`MAX_CORE_INSTANCES_PER_HOOK`].
pub const MAX_TABLES_PER_HOOK: u32 = 8;
/// The pooling allocator's slots per hook instance ([`HookRuntimeConfig::max_instances`]):
/// enough for a mix of components and core modules without reserving every component's
/// maximum. Slots reserve address space, not memory (a memory slot reserves 4 GiB plus
/// guard pages of it), so they are cheap but not free.
const CORE_INSTANCES_PER_SLOT: u32 = 16;
const MEMORIES_PER_SLOT: u32 = 2;
const TABLES_PER_SLOT: u32 = 4;

/// Threads compiling hook modules in the background at once
/// ([`HookRuntime::prepare_in_background`]). wasmtime is built without parallel compilation,
/// so a compile holds one core for its whole length (seconds for a Python component): one
/// at a time leaves the other cores to conversations, and further modules wait their turn
/// in the order they were asked for.
pub const BACKGROUND_COMPILE_THREADS: usize = 1;

/// Set (to anything) in the environment, the runtime writes `/tmp/perf-PID.map`, so `perf
/// report` names the functions of the hooks it compiled.
pub const PERFMAP_ENV: &str = "COLLOQUY_PERFMAP";

/// How a [`HookRuntime`] is set up.
#[derive(Clone, Debug)]
pub struct HookRuntimeConfig {
    /// Where compiled modules are cached (`None`: compile in memory every start). Its files
    /// are loaded as native code, so it is used only when it belongs to this user and no
    /// one else can write to it (a missing one is created with mode 0700); otherwise the
    /// runtime compiles without it and logs a warning.
    pub cache_dir: Option<PathBuf>,
    /// Instances alive at once across all modules (the pooling allocator's size).
    pub max_instances: u32,
    /// Idle instances kept per module.
    pub idle_instances_per_module: usize,
    /// The longest budget any call gets, whatever its template asks for.
    pub max_timeout: Duration,
    /// The threads hooked conversations' steps run on.
    pub pool: HookPoolConfig,
}

impl Default for HookRuntimeConfig {
    fn default() -> HookRuntimeConfig {
        HookRuntimeConfig {
            cache_dir: Some(std::env::temp_dir().join("colloquy-hook-cache")),
            max_instances: DEFAULT_MAX_INSTANCES,
            idle_instances_per_module: DEFAULT_IDLE_INSTANCES_PER_MODULE,
            max_timeout: DEFAULT_MAX_TIMEOUT,
            pool: HookPoolConfig::default(),
        }
    }
}

/// A module as loading left it: ready, or refused with the reason.
type Loaded = Result<Arc<LoadedModule>, HookFailure>;

/// Told a module's SHA-256 (lowercase hex) when its background compile ends, whichever way.
pub type CompileListener = Arc<dyn Fn(&str) + Send + Sync>;

/// What [`HookRuntime::prepare_in_background`] says of a template's hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Preparation {
    /// Loaded, and it exports every event the template lists (or the template has no hook).
    Ready,
    /// Compiling on a background thread (or waiting for one).
    Compiling,
    /// Refused: it does not compile, link or fit the template.
    Refused(HookFailure),
}

/// The background compiles ([`HookRuntime::prepare_in_background`]).
#[derive(Default)]
struct CompileQueue {
    /// Modules waiting for a compile thread, in the order they were asked for, each with
    /// the template that asked first (for logs).
    waiting: VecDeque<(Arc<HookModule>, Arc<str>)>,
    /// Every module waiting or compiling, by SHA-256, with who to tell when it ends (each
    /// listener once).
    listeners: HashMap<Arc<str>, Vec<CompileListener>>,
    /// Compile threads running.
    threads: usize,
}

/// Runs hook modules. Cheap to share (`Arc`); see the module docs for what it keeps.
pub struct HookRuntime {
    engine: wasmtime::Engine,
    linkers: Linkers,
    /// Loaded modules by SHA-256; a module that failed to load keeps its failure, so a bad
    /// module is compiled once, not at every message. Looked up at every call, so hashed with
    /// the engine's fast keyed hasher.
    modules: RwLock<HashMap<Arc<str>, Loaded, colloquy_core::keyed::Hasher>>,
    /// Modules compiling in the background; locked before `modules` when both are.
    compiles: Mutex<CompileQueue>,
    config: HookRuntimeConfig,
    ticker: ticker::EpochTicker,
    latency: latency::HookLatency,
    pool: HookPool,
}

impl std::fmt::Debug for HookRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookRuntime")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The runtime could not be set up (the pooling allocator could not reserve its memory).
#[derive(Debug, thiserror::Error)]
#[error("cannot start the hook runtime: {0}")]
pub struct RuntimeError(String);

impl HookRuntime {
    /// A runtime with its own wasmtime engine and epoch ticker thread, whose hooks read the
    /// wall clock through `now-ms`.
    pub fn new(config: HookRuntimeConfig) -> Result<HookRuntime, RuntimeError> {
        HookRuntime::with_clock(config, Arc::new(colloquy_core::clock::SystemClock))
    }

    /// [`HookRuntime::new`], with hooks reading `clock` through `now-ms`: give it the
    /// engine's clock, so a test clock (template tests, replay) is the hooks' clock too.
    pub fn with_clock(
        config: HookRuntimeConfig,
        clock: Arc<dyn colloquy_core::clock::Clock>,
    ) -> Result<HookRuntime, RuntimeError> {
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        pool.total_component_instances(config.max_instances)
            .total_core_instances(config.max_instances.saturating_mul(CORE_INSTANCES_PER_SLOT))
            .total_memories(config.max_instances.saturating_mul(MEMORIES_PER_SLOT))
            .total_tables(config.max_instances.saturating_mul(TABLES_PER_SLOT))
            .max_core_instances_per_component(MAX_CORE_INSTANCES_PER_HOOK)
            .max_memories_per_component(MAX_MEMORIES_PER_HOOK)
            .max_tables_per_component(MAX_TABLES_PER_HOOK)
            .max_memory_size(MAX_MEMORY_BYTES as usize)
            .table_elements(MAX_TABLE_ELEMENTS);
        let mut wasm = wasmtime::Config::new();
        // `perf` can name the hooks' compiled functions (docs/hook-abi.md, "Profiling").
        if std::env::var_os(PERFMAP_ENV).is_some() {
            wasm.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        wasm.epoch_interruption(true)
            .wasm_component_model(true)
            .allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        let engine =
            wasmtime::Engine::new(&wasm).map_err(|error| RuntimeError(error.to_string()))?;
        let linkers = Linkers {
            core: host::core_linker(&engine).map_err(|error| RuntimeError(error.to_string()))?,
            component: host::component_linker(&engine)
                .map_err(|error| RuntimeError(error.to_string()))?,
            clock,
        };
        let ticker = ticker::EpochTicker::start(engine.clone())
            .map_err(|error| RuntimeError(error.to_string()))?;
        let pool = HookPool::start(config.pool.clone())
            .map_err(|error| RuntimeError(error.to_string()))?;
        Ok(HookRuntime {
            pool,
            engine,
            linkers,
            modules: RwLock::new(HashMap::default()),
            compiles: Mutex::new(CompileQueue::default()),
            config,
            ticker,
            latency: latency::HookLatency::default(),
        })
    }

    /// The longest budget any call gets (the operator's ceiling).
    pub fn max_timeout(&self) -> Duration {
        self.config.max_timeout
    }

    /// The threads hooked conversations' steps run on.
    pub fn pool(&self) -> &HookPool {
        &self.pool
    }

    /// The budget a call of `spec`'s hook gets: its template's, held to the ceiling.
    fn budget_ms(&self, spec: &HookSpec) -> u64 {
        let ceiling = u64::try_from(self.config.max_timeout.as_millis()).unwrap_or(u64::MAX);
        spec.limits.timeout_ms.min(ceiling.max(1))
    }

    /// Durations of the hook calls this runtime ran, for `/metrics`.
    pub fn latency(&self) -> &latency::HookLatency {
        &self.latency
    }

    /// Loads and link-checks the template's hook module now (instead of at its first call),
    /// and checks that it exports every event the template lists. For `templates check` and
    /// for callers that want a bad module reported when a template is loaded.
    pub fn prepare(&self, template: &CompiledTemplate) -> Result<(), HookFailure> {
        let Some(spec) = &template.hooks else {
            return Ok(());
        };
        let _ticking = self.ticker.ticking(module::VERSION_CALL_BUDGET);
        let module = self.module(template)?;
        for event in &spec.events {
            module.check_event(*event)?;
        }
        Ok(())
    }

    /// [`HookRuntime::prepare`] without waiting for a compile: a module loaded (or refused)
    /// already answers at once; any other starts compiling on a background thread (at most
    /// [`BACKGROUND_COMPILE_THREADS`], one compile per module however often it is asked
    /// for) and answers [`Preparation::Compiling`]; `listener` is told the module's hash
    /// when the compile ends, and asking again then answers ready or refused.
    pub fn prepare_in_background(
        self: &Arc<Self>,
        template: &CompiledTemplate,
        listener: &CompileListener,
    ) -> Preparation {
        let Some(spec) = &template.hooks else {
            return Preparation::Ready;
        };
        let Some(source) = &template.hook_module else {
            return Preparation::Refused(HookFailure::NoModule);
        };
        let fit = |loaded: Loaded| {
            let checked = loaded.and_then(|module| {
                spec.events
                    .iter()
                    .try_for_each(|event| module.check_event(*event))
            });
            match checked {
                Ok(()) => Preparation::Ready,
                Err(failure) => Preparation::Refused(failure),
            }
        };
        if let Some(loaded) = self.loaded(&source.sha256) {
            return fit(loaded);
        }
        // What can be refused without compiling is refused now, not after the compile.
        if let Err(failure) = module::precheck(&source.bytes) {
            return Preparation::Refused(failure);
        }
        let mut queue = self
            .compiles
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // A compile may have ended since the look-up; it stores its module before it leaves
        // the queue, so under the queue's lock one of the two has it.
        if let Some(loaded) = self.loaded(&source.sha256) {
            return fit(loaded);
        }
        let queue = &mut *queue;
        let asked_before = queue.listeners.contains_key(&source.sha256);
        let listeners = queue.listeners.entry(source.sha256.clone()).or_default();
        if !listeners.iter().any(|known| Arc::ptr_eq(known, listener)) {
            listeners.push(listener.clone());
        }
        if asked_before {
            return Preparation::Compiling;
        }
        queue
            .waiting
            .push_back((source.clone(), template.name.clone()));
        tracing::info!(template = %template.name, module = %source.path.display(), sha256 = %source.sha256, "hook module compiling in the background");
        if queue.threads < BACKGROUND_COMPILE_THREADS {
            let runtime = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("hook-compile".to_owned())
                .spawn(move || runtime.compile_in_background());
            match spawned {
                Ok(_) => queue.threads += 1,
                Err(error) => {
                    queue.waiting.pop_back();
                    queue.listeners.remove(&source.sha256);
                    return Preparation::Refused(HookFailure::Compile(format!(
                        "cannot start a compile thread: {error}"
                    )));
                }
            }
        }
        Preparation::Compiling
    }

    /// A compile thread: compiles the waiting modules one after the other, tells each one's
    /// listeners, and ends when none is left.
    fn compile_in_background(&self) {
        loop {
            let (source, template) = {
                let mut queue = self
                    .compiles
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                match queue.waiting.pop_front() {
                    Some(next) => next,
                    None => {
                        queue.threads -= 1;
                        return;
                    }
                }
            };
            // Loading runs the module's version export.
            let ticking = self.ticker.ticking(module::VERSION_CALL_BUDGET);
            // A panic in the compiler refuses the module rather than ending this thread with
            // the module still listed as compiling.
            let loaded =
                std::panic::catch_unwind(AssertUnwindSafe(|| self.load(&source, &template)));
            drop(ticking);
            if loaded.is_err() {
                // Kept for the listeners, who ask again.
                let _ = self.store(
                    &source,
                    Err(HookFailure::Compile("the compiler panicked".to_owned())),
                );
            }
            let listeners = self
                .compiles
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .listeners
                .remove(&source.sha256)
                .unwrap_or_default();
            for listener in listeners {
                if std::panic::catch_unwind(AssertUnwindSafe(|| listener(&source.sha256))).is_err()
                {
                    tracing::error!(sha256 = %source.sha256, "a compile listener panicked");
                }
            }
        }
    }

    /// The module with this hash, if it was loaded (or refused) already.
    fn loaded(&self, sha256: &str) -> Option<Loaded> {
        self.modules
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(sha256)
            .cloned()
    }

    /// Calls the template's hook for `event` with `input`, with its whole budget. Traced
    /// with the conversation id, template revision, hook and duration.
    pub fn call(
        &self,
        template: &CompiledTemplate,
        event: HookEvent,
        input: &HookInput<'_>,
    ) -> Result<HookOutput, HookFailure> {
        self.call_at(CallSite::Owned, template, event, input)
    }

    /// Makes idle instances of `template`'s hook until it has `instances` (no more than the
    /// runtime keeps idle per module), each having answered `event` on `input` once, with
    /// the hook's whole budget: an instance's first call is the slow one for an interpreter
    /// (its heap touched for the first time), and here it is made before traffic needs it.
    /// Answers how many idle instances the hook has then. `cargo bench --bench hooks` weighs
    /// an idle instance's resident memory with it.
    pub fn warm(
        &self,
        template: &CompiledTemplate,
        event: HookEvent,
        input: &HookInput<'_>,
        instances: usize,
    ) -> Result<usize, HookFailure> {
        let Some(spec) = &template.hooks else {
            return Ok(0);
        };
        let budget_ms = self.budget_ms(spec);
        let _ticking = self.ticker.ticking(Duration::from_millis(budget_ms));
        let module = self.module(template)?;
        module.check_event(event)?;
        module.warm(
            &self.engine,
            self.ticker.handle(),
            event,
            input,
            spec.limits.memory_bytes,
            budget_ms,
            self.config.idle_instances_per_module,
            instances,
        )
    }

    /// Whether `template`'s hook calls may be tried on an async worker: its module is loaded
    /// (loading compiles, which takes long) and has never run past [`INLINE_SLICE`] there.
    pub fn runs_inline(&self, template: &CompiledTemplate) -> bool {
        let Some(source) = &template.hook_module else {
            return true;
        };
        self.modules
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&source.sha256)
            .is_some_and(|loaded| {
                loaded
                    .as_ref()
                    .is_ok_and(|module| !module.pooled.load(std::sync::atomic::Ordering::Relaxed))
            })
    }

    /// [`HookRuntime::call`] at `site`.
    pub fn call_at(
        &self,
        site: CallSite,
        template: &CompiledTemplate,
        event: HookEvent,
        input: &HookInput<'_>,
    ) -> Result<HookOutput, HookFailure> {
        // A span per call, for exported traces (disabled, and free, otherwise).
        let span = tracing::debug_span!(
            "hook call",
            colloquy.conversation.id = %input.conversation.id,
            colloquy.template = %template.name,
            colloquy.template.revision = %template.revision,
            colloquy.hook.event = event_name(event),
            colloquy.hook.module_kind = tracing::field::Empty,
            colloquy.hook.language = tracing::field::Empty,
            colloquy.hook.outcome = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let _entered = span.enter();
        let started = Instant::now();
        let result = self.call_untraced(site, template, event, input, started);
        if !span.is_disabled() {
            self.describe_call(&span, template, &result);
        }
        if result == Err(HookFailure::NeedsPool) {
            tracing::debug!(template = %template.name, "hook moved to the hook pool");
            return result;
        }
        let elapsed = started.elapsed();
        self.latency.observe(event, result.is_ok(), elapsed);
        let duration_us = elapsed.as_micros() as u64;
        // Field values are formatted only when the event is enabled: no cost when it is not.
        let hook = template.hook_module.as_ref().map(|m| m.path.display());
        let hook = tracing::field::display(HookName(hook));
        match &result {
            Ok(output) => tracing::debug!(
                conversation = %input.conversation.id,
                template = %template.name,
                revision = %template.revision,
                hook,
                event = event_name(event),
                duration_us,
                actions = output.actions.len(),
                "hook ran"
            ),
            Err(failure) => tracing::warn!(
                conversation = %input.conversation.id,
                template = %template.name,
                revision = %template.revision,
                hook,
                event = event_name(event),
                duration_us,
                %failure,
                "hook failed"
            ),
        }
        if let Ok(output) = &result {
            for line in &output.log {
                let line = colloquy_core::log_safe::OneLine(line);
                tracing::info!(conversation = %input.conversation.id, hook, "{line}");
            }
        }
        result
    }

    fn call_untraced(
        &self,
        site: CallSite,
        template: &CompiledTemplate,
        event: HookEvent,
        input: &HookInput<'_>,
        started: Instant,
    ) -> Result<HookOutput, HookFailure> {
        let Some(spec) = &template.hooks else {
            return Ok(HookOutput::default());
        };
        let full_ms = self.budget_ms(spec);
        let slice_ms = u64::try_from(INLINE_SLICE.as_millis()).unwrap_or(u64::MAX);
        // Inline, a call gets the slice (when its budget is longer) and no wall margin.
        let (budget_ms, wall_margin) = match site {
            CallSite::Owned => (full_ms, WALL_MARGIN),
            CallSite::Inline => (full_ms.min(slice_ms), Duration::ZERO),
        };
        // Loading runs the module's version export; the call runs the hook.
        let _ticking = self.ticker.ticking(Duration::from_millis(budget_ms));
        let module = self.module(template)?;
        module.check_event(event)?;
        let pooled = &module.pooled;
        if site == CallSite::Inline && pooled.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(HookFailure::NeedsPool);
        }
        module.call(
            &self.engine,
            self.ticker.handle(),
            event,
            input,
            spec.limits.memory_bytes,
            budget_ms,
            wall_margin,
            &input.conversation.id,
            self.config.idle_instances_per_module,
            started,
            site,
        )
    }

    /// Records on a hook call's span what ran and how it ended: the module's kind and source
    /// language (when its `producers` section names one), and the outcome (`ok`, `failed`,
    /// or `needs_pool` for a call handed on to the hook pool, where it runs again).
    fn describe_call(
        &self,
        span: &tracing::Span,
        template: &CompiledTemplate,
        result: &Result<HookOutput, HookFailure>,
    ) {
        if let Some(Ok(module)) =
            (template.hook_module.as_ref()).and_then(|m| self.loaded(&m.sha256))
        {
            span.record("colloquy.hook.module_kind", module.form().name());
            if let Some(language) = module.language() {
                span.record("colloquy.hook.language", language);
            }
        }
        let outcome = match result {
            Ok(_) => "ok",
            Err(HookFailure::NeedsPool) => "needs_pool",
            Err(_) => "failed",
        };
        span.record("colloquy.hook.outcome", outcome);
        if let Err(failure) = result
            && *failure != HookFailure::NeedsPool
        {
            span.record("otel.status_code", "error");
        }
    }

    /// The loaded module of a template, loading it on first use.
    fn module(&self, template: &CompiledTemplate) -> Result<Arc<LoadedModule>, HookFailure> {
        let source = template.hook_module.as_ref().ok_or(HookFailure::NoModule)?;
        // A poisoned lock only means another call panicked while holding it; the map itself
        // is always whole (entries are inserted in one operation).
        if let Some(loaded) = self.loaded(&source.sha256) {
            return loaded;
        }
        self.load(source, &template.name)
    }

    /// Loads `source` (for `template`, in logs) and keeps the outcome; if another thread
    /// loaded it meanwhile, that one's outcome is kept and returned.
    fn load(&self, source: &HookModule, template: &str) -> Loaded {
        let loaded = LoadedModule::load(
            &self.engine,
            self.ticker.handle(),
            &self.linkers,
            source,
            self.config.cache_dir.as_deref(),
        )
        .map(Arc::new);
        match &loaded {
            Ok(loaded) => {
                tracing::info!(template, module = %source.path.display(), sha256 = %source.sha256, form = loaded.form().name(), "hook module loaded");
            }
            Err(failure) => {
                tracing::warn!(template, module = %source.path.display(), sha256 = %source.sha256, %failure, "hook module refused");
            }
        }
        self.store(source, loaded)
    }

    /// Keeps `loaded` as the outcome of `source`, unless one is kept already; returns the
    /// one kept.
    fn store(&self, source: &HookModule, loaded: Loaded) -> Loaded {
        self.modules
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(source.sha256.clone())
            .or_insert(loaded)
            .clone()
    }
}

/// A hook module's path for log fields (empty when the template has none).
struct HookName<'a>(Option<std::path::Display<'a>>);

impl std::fmt::Display for HookName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(path) => path.fmt(f),
            None => Ok(()),
        }
    }
}

impl HookCaller for HookRuntime {
    fn call_at(
        &self,
        site: CallSite,
        template: &CompiledTemplate,
        event: HookEvent,
        input: &HookInput<'_>,
    ) -> Result<HookOutput, HookFailure> {
        HookRuntime::call_at(self, site, template, event, input)
    }

    fn runs_inline(&self, template: &CompiledTemplate) -> bool {
        HookRuntime::runs_inline(self, template)
    }

    fn pool(&self) -> &HookPool {
        HookRuntime::pool(self)
    }

    fn latency(&self) -> &latency::HookLatency {
        HookRuntime::latency(self)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod component_tests;
