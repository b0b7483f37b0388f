//! One hook: compiled, checked, pre-instantiated, with its idle instances. A hook file is a
//! core module (ABI v1, `core`) or a component of the hooks world (`component`); the header
//! tells them apart, and both are called, budgeted, capped and reused the same way here.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use colloquy_core::clock::Clock;
use colloquy_policy::compiled::HookModule;
use colloquy_protocol::hook::{HookInput, HookOutput};
use colloquy_protocol::template::HookEvent;
use wasmtime::{Engine, InstancePre, Linker, Store, Trap};

use super::budget::CallBudget;
use super::component::{ComponentExports, ExportIndices};
use super::core::CoreExports;
use super::host::{HostState, MemoryCapExceeded};
use super::ticker::{self, TickerHandle};
use super::{CallSite, HookFailure, cache, event_name};

/// Budget of the `hooks_abi_version` call made at load time (it returns a constant), and of
/// instantiation (start functions, data initialisers; a component's own set-up, which for a
/// Python interpreter restored from its snapshot is a few milliseconds).
pub(super) const VERSION_CALL_BUDGET: Duration = Duration::from_millis(100);
/// Calls tried on an async worker that may run past the inline slice before the module's
/// calls move to the hook pool for good: an interpreter's garbage collector may pause a call
/// for a few milliseconds now and then, which says little of the calls after it. A hook that
/// loops holds an async worker for this many slices at most.
pub(super) const INLINE_OVERRUNS: u32 = 3;
/// Calls in a row, tried on an async worker, that may be stopped at the inline slice while
/// their thread was kept from a core ([`CallBudget::starved`]) before the module's calls
/// move to the hook pool for good; they do not count towards [`INLINE_OVERRUNS`], and a call
/// that answers inline starts the count again. The slice is wall time: on a loaded machine
/// the OS takes a server's thread away for longer than the slice now and then, mid-call.
/// With each such call counted, the credit policy ran on the pool after a few seconds of
/// `http-bench --pin --hook` on a busy day, and a message cost 12-28 µs more of server CPU
/// (the crossings to a pool thread and back) than inline.
pub(super) const STARVED_OVERRUNS: u32 = 3;
/// An instance keeps the buffer its events are encoded in between calls, unless an event
/// made it grow past this.
const KEEP_INPUT_CAPACITY: usize = 64 * 1024;

/// The three event exports, in [`event_index`] order (the world's names, which ABI v1's
/// core exports share).
pub(super) const EVENT_EXPORTS: [&str; 3] = ["start", "message", "timeout"];

pub(super) fn event_index(event: HookEvent) -> usize {
    match event {
        HookEvent::OnStart => 0,
        HookEvent::OnMessage => 1,
        HookEvent::OnTimeout => 2,
    }
}

/// Refuses, without compiling, a file that cannot load: not wasm, or a component whose
/// imports or exports do not fit the hooks world (`component::precheck`).
pub(super) fn precheck(bytes: &[u8]) -> Result<(), HookFailure> {
    match BinaryForm::of(bytes)? {
        BinaryForm::Core => Ok(()),
        BinaryForm::Component => super::component::precheck(bytes),
    }
}

/// What a hook file holds, by its first 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryForm {
    /// `\0asm`, version 1: a core module (ABI v1).
    Core,
    /// `\0asm`, version 0x0d, layer 1: a component.
    Component,
}

impl BinaryForm {
    /// The form of `bytes`, or a sentence saying why they are neither.
    pub fn of(bytes: &[u8]) -> Result<BinaryForm, HookFailure> {
        match bytes.get(..8) {
            Some([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]) => Ok(BinaryForm::Core),
            Some([0x00, 0x61, 0x73, 0x6d, _, _, 0x01, 0x00]) => Ok(BinaryForm::Component),
            Some([0x00, 0x61, 0x73, 0x6d, ..]) => Err(HookFailure::Compile(
                "an unknown wasm binary version (neither a core module nor a component)".into(),
            )),
            _ => Err(HookFailure::Compile(
                "the file does not start with the wasm magic bytes `\\0asm`".into(),
            )),
        }
    }

    /// "core module" or "component", for logs and status.
    pub fn name(self) -> &'static str {
        match self {
            BinaryForm::Core => "core module",
            BinaryForm::Component => "component",
        }
    }
}

/// A hook ready to instantiate.
pub struct LoadedModule {
    /// Set once calls tried on an async worker ran past [`super::INLINE_SLICE`]
    /// [`INLINE_OVERRUNS`] times: from then on its calls run on the hook pool only.
    pub(super) pooled: AtomicBool,
    /// Calls tried on an async worker that ran past the slice.
    inline_overruns: AtomicU32,
    /// Calls in a row stopped at the slice while their thread was starved.
    starved_overruns: AtomicU32,
    form: Form,
    /// The source language its `producers` section names, for trace spans.
    language: Option<String>,
    /// Which of `start`, `message`, `timeout` it exports.
    events: [bool; 3],
    /// Instances waiting for the next call.
    idle: Mutex<Vec<Instance>>,
    /// What its instances' `now-ms` reads.
    clock: Arc<dyn Clock>,
}

/// The pre-instantiated hook, in its binary form.
enum Form {
    Core(InstancePre<HostState>),
    Component {
        pre: wasmtime::component::InstancePre<HostState>,
        exports: ExportIndices,
    },
}

/// A live instance.
pub(super) struct Instance {
    store: Store<HostState>,
    exports: Exports,
    /// The JSON of the event being passed, reused from call to call.
    input: Vec<u8>,
}

/// A live instance's exports, in its binary form.
#[allow(
    clippy::large_enum_variant,
    reason = "instances are few and long-lived; a box would add a pointer chase to every core call"
)]
enum Exports {
    Core(CoreExports),
    Component(ComponentExports),
}

/// The linkers hooks are instantiated with (one per binary form), and the clock their
/// host functions read.
pub(super) struct Linkers {
    pub core: Linker<HostState>,
    pub component: wasmtime::component::Linker<HostState>,
    pub clock: Arc<dyn Clock>,
}

impl LoadedModule {
    /// Compiles (or reads from the AOT cache), checks the hook's imports and exports (a
    /// core module against ABI v1, a component against the hooks world), instantiates it
    /// once, and asks a core module its ABI version.
    pub fn load(
        engine: &Engine,
        ticker: &TickerHandle,
        linkers: &Linkers,
        source: &HookModule,
        cache_dir: Option<&Path>,
    ) -> Result<LoadedModule, HookFailure> {
        let link = |error: wasmtime::Error| HookFailure::Link(format!("{error:#}"));
        let (form, events) = match BinaryForm::of(&source.bytes)? {
            BinaryForm::Core => {
                let module: wasmtime::Module = cache::compile(engine, source, cache_dir)?;
                let events = super::core::check_shape(&module)?;
                let pre = linkers.core.instantiate_pre(&module).map_err(link)?;
                (Form::Core(pre), events)
            }
            BinaryForm::Component => {
                super::component::precheck(&source.bytes)?;
                let component: wasmtime::component::Component =
                    cache::compile(engine, source, cache_dir)?;
                let exports = super::component::check_world(engine, &component)?;
                let pre = linkers
                    .component
                    .instantiate_pre(&component)
                    .map_err(|error| HookFailure::World(format!("{error:#}")))?;
                let events = exports.map(|index| index.is_some());
                (Form::Component { pre, exports }, events)
            }
        };
        let loaded = LoadedModule {
            pooled: AtomicBool::new(false),
            inline_overruns: AtomicU32::new(0),
            starved_overruns: AtomicU32::new(0),
            form,
            language: super::producers::source_language(&source.bytes),
            events,
            idle: Mutex::new(Vec::new()),
            clock: linkers.clock.clone(),
        };
        let mut probe = loaded.instantiate(engine, ticker, super::MAX_MEMORY_BYTES)?;
        if let Exports::Core(exports) = &probe.exports {
            start_budget(&mut probe.store, VERSION_CALL_BUDGET, Instant::now());
            let version = exports.version(&mut probe.store).map_err(|error| {
                failure(&probe.store, error, VERSION_CALL_BUDGET.as_millis() as u64)
            })?;
            super::core::check_version(version)?;
        }
        Ok(loaded)
    }

    /// A call tried on an async worker ran past the slice: after [`INLINE_OVERRUNS`] of
    /// them, or [`STARVED_OVERRUNS`] in a row whose thread was `starved`, the module's calls
    /// move to the hook pool for good.
    pub(super) fn overran_inline(&self, starved: bool) {
        let (count, most) = match starved {
            true => (&self.starved_overruns, STARVED_OVERRUNS),
            false => (&self.inline_overruns, INLINE_OVERRUNS),
        };
        if count.fetch_add(1, Ordering::Relaxed) + 1 >= most {
            self.pooled.store(true, Ordering::Relaxed);
        }
    }

    /// A call tried on an async worker answered: starved overruns start counting afresh.
    fn answered_inline(&self) {
        // A load first: in the steady state a call writes nothing here.
        if self.starved_overruns.load(Ordering::Relaxed) != 0 {
            self.starved_overruns.store(0, Ordering::Relaxed);
        }
    }

    /// The language the module was written in, when its toolchain recorded it.
    pub fn language(&self) -> Option<&str> {
        self.language.as_deref()
    }

    /// Core module or component.
    pub fn form(&self) -> BinaryForm {
        match self.form {
            Form::Core(_) => BinaryForm::Core,
            Form::Component { .. } => BinaryForm::Component,
        }
    }

    /// How many instances wait for a call.
    #[cfg(test)]
    pub fn idle_count(&self) -> usize {
        self.idle.lock().map(|idle| idle.len()).unwrap_or(0)
    }

    /// Fails when the hook lacks the export for `event`.
    pub fn check_event(&self, event: HookEvent) -> Result<(), HookFailure> {
        if self.events[event_index(event)] {
            Ok(())
        } else {
            Err(HookFailure::MissingEvent {
                event: event_name(event),
                export: EVENT_EXPORTS[event_index(event)],
            })
        }
    }

    /// One call: input in, output out, on an idle instance, or on a new one unless `site` is
    /// an async worker ([`HookFailure::NeedsPool`] then): instantiating takes milliseconds
    /// for a component, and a fresh instance's first call touches its memory for the first
    /// time (a Python interpreter's first call took 15-40 ms in a debug build), so neither
    /// happens where HTTP is served. A call on an async worker stopped at its budget (the
    /// slice, or its wall limit, which has no margin there) is [`HookFailure::NeedsPool`]
    /// too: the pool gives it its whole budget and the margin, and only there is a timeout
    /// the hook's failure ([`LoadedModule::overran_inline`] counts it). The instance goes
    /// back to the idle stack only when the call succeeded. `started` is when the caller
    /// began the call; a reused instance's budget counts from it.
    #[allow(
        clippy::too_many_arguments,
        reason = "the runtime's parts a call uses, each once"
    )]
    pub fn call(
        &self,
        engine: &Engine,
        ticker: &TickerHandle,
        event: HookEvent,
        input: &HookInput<'_>,
        cap: u64,
        budget_ms: u64,
        wall_margin: Duration,
        conversation: &str,
        max_idle: usize,
        started: Instant,
        site: CallSite,
    ) -> Result<HookOutput, HookFailure> {
        let reused = self
            .idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop();
        let (instance, started) = match reused {
            // An instance grown under a larger cap (another template, same module) is over
            // this one's: start afresh rather than let it keep memory it may not have.
            Some(instance) if instance.store.data().memory_bytes <= cap => (instance, started),
            _ if site == CallSite::Inline => return Err(HookFailure::NeedsPool),
            // The call's budget starts after the instantiation (which has its own).
            _ => (self.instantiate(engine, ticker, cap)?, Instant::now()),
        };
        let (called, starved) = self.call_on(
            instance,
            event,
            input,
            cap,
            CallBudget::start_with_margin(Duration::from_millis(budget_ms), started, wall_margin),
            budget_ms,
            conversation,
            max_idle,
        );
        if site == CallSite::Owned {
            return called;
        }
        match called {
            Err(HookFailure::Timeout { .. }) => {
                self.overran_inline(starved);
                Err(HookFailure::NeedsPool)
            }
            called => {
                if called.is_ok() {
                    self.answered_inline();
                }
                called
            }
        }
    }

    /// Adds instances to the idle stack until it holds `count` (at most `max_idle`), each
    /// made now and having answered `event` on `input` once; answers how many it holds.
    #[allow(
        clippy::too_many_arguments,
        reason = "the runtime's parts a call uses, each once"
    )]
    pub fn warm(
        &self,
        engine: &Engine,
        ticker: &TickerHandle,
        event: HookEvent,
        input: &HookInput<'_>,
        cap: u64,
        budget_ms: u64,
        max_idle: usize,
        count: usize,
    ) -> Result<usize, HookFailure> {
        let idle = || self.idle.lock().map_or(0, |idle| idle.len());
        while idle() < count.min(max_idle) {
            let instance = self.instantiate(engine, ticker, cap)?;
            let budget = CallBudget::start_with_margin(
                Duration::from_millis(budget_ms),
                Instant::now(),
                super::WALL_MARGIN,
            );
            let conversation = &input.conversation.id;
            let (called, _) = self.call_on(
                instance,
                event,
                input,
                cap,
                budget,
                budget_ms,
                conversation,
                max_idle,
            );
            called?;
        }
        Ok(idle())
    }

    /// [`LoadedModule::call`] on `instance`, with `budget`; and whether the call, stopped
    /// at its budget, was starved ([`CallBudget::starved`]).
    #[allow(
        clippy::too_many_arguments,
        reason = "the runtime's parts a call uses, each once"
    )]
    fn call_on(
        &self,
        mut instance: Instance,
        event: HookEvent,
        input: &HookInput<'_>,
        cap: u64,
        budget: CallBudget,
        budget_ms: u64,
        conversation: &str,
        max_idle: usize,
    ) -> (Result<HookOutput, HookFailure>, bool) {
        let state = instance.store.data_mut();
        state.memory_cap = cap;
        state.memory_refused = None;
        state.lines_logged = 0;
        if *state.conversation != *conversation {
            state.conversation = conversation.into();
        }
        // The event is encoded into the instance's own buffer: no allocation once it has
        // grown to the size of the conversation's events.
        instance.input.clear();
        if instance.input.capacity() > KEEP_INPUT_CAPACITY {
            instance.input = Vec::new();
        }
        if let Err(error) = colloquy_core::hooks::input::encode(input, &mut instance.input) {
            let failure = HookFailure::BadOutput(format!("cannot encode the input: {error}"));
            return (Err(failure), false);
        }
        instance.store.data_mut().budget = budget;
        instance.store.set_epoch_deadline(1);
        let output = match instance.invoke(event) {
            Ok(output) => output,
            Err(Invoke::Wasm(error)) => {
                let failure = failure(&instance.store, error, budget_ms);
                // Asked now, on the thread that ran the call, before anything else runs.
                let starved = matches!(failure, HookFailure::Timeout { .. })
                    && instance.store.data().budget.starved();
                return (Err(failure), starved);
            }
            Err(Invoke::Failure(failure)) => return (Err(failure), false),
        };
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if idle.len() < max_idle {
            idle.push(instance);
        }
        drop(idle);
        (output, false)
    }

    fn instantiate(
        &self,
        engine: &Engine,
        ticker: &TickerHandle,
        cap: u64,
    ) -> Result<Instance, HookFailure> {
        let mut store = Store::new(engine, HostState::new(cap, self.clock.clone()));
        store.limiter(|state| state);
        let ticker = ticker.clone();
        store.epoch_deadline_callback(move |store| {
            Ok(ticker::on_epoch(&ticker, &store.data().budget))
        });
        // Instantiation runs start functions and initialisers: give it a budget too.
        start_budget(&mut store, VERSION_CALL_BUDGET, Instant::now());
        let instantiated = match &self.form {
            Form::Core(pre) => pre.instantiate(&mut store).map(|instance| {
                CoreExports::new(&mut store, &instance, self.events).map(Exports::Core)
            }),
            Form::Component { pre, exports } => pre.instantiate(&mut store).map(|instance| {
                ComponentExports::new(&mut store, &instance, exports).map(Exports::Component)
            }),
        };
        let exports =
            instantiated.map_err(|error| match error.downcast_ref::<MemoryCapExceeded>() {
                Some(exceeded) => HookFailure::OutOfMemory {
                    requested: exceeded.requested,
                    cap: exceeded.cap,
                },
                None => match error.downcast_ref::<Trap>() {
                    Some(Trap::Interrupt) => HookFailure::Instantiate(format!(
                        "its set-up ran longer than {} ms",
                        VERSION_CALL_BUDGET.as_millis()
                    )),
                    _ => HookFailure::Instantiate(format!("{error:#}")),
                },
            })??;
        Ok(Instance {
            store,
            exports,
            input: Vec::new(),
        })
    }
}

/// What went wrong inside a call.
pub(super) enum Invoke {
    /// An error from wasm (a trap, an interrupt, the limiter).
    Wasm(wasmtime::Error),
    /// The guest broke the calling convention.
    Failure(HookFailure),
}

impl From<wasmtime::Error> for Invoke {
    fn from(error: wasmtime::Error) -> Invoke {
        Invoke::Wasm(error)
    }
}

impl Instance {
    /// A core instance for [`super::operators`], whose engine counts fuel instead of time.
    pub(super) fn core(
        mut store: Store<HostState>,
        instance: &wasmtime::Instance,
        events: [bool; 3],
    ) -> Result<Instance, HookFailure> {
        let exports = CoreExports::new(&mut store, instance, events)?;
        Ok(Instance {
            store,
            exports: Exports::Core(exports),
            input: Vec::new(),
        })
    }

    /// One call on `input` (the event's JSON), as [`LoadedModule::call`] makes it but without
    /// budget or reuse: for [`super::operators`].
    pub(super) fn call_once(
        &mut self,
        event: HookEvent,
        input: &[u8],
    ) -> Result<HookOutput, HookFailure> {
        self.input.clear();
        self.input.extend_from_slice(input);
        match self.invoke(event) {
            Ok(output) => output,
            Err(Invoke::Wasm(error)) => Err(HookFailure::Trap(error.to_string())),
            Err(Invoke::Failure(failure)) => Err(failure),
        }
    }

    /// The store the instance lives in.
    pub(super) fn store_mut(&mut self) -> &mut Store<HostState> {
        &mut self.store
    }

    /// Calls the event's export on `self.input`. The outer error is the instance's (it is
    /// discarded); the inner one, bad output, is the hook's answer's (the instance is fine).
    fn invoke(&mut self, event: HookEvent) -> Result<Result<HookOutput, HookFailure>, Invoke> {
        match &self.exports {
            Exports::Core(exports) => exports.invoke(&mut self.store, event, &self.input),
            Exports::Component(exports) => exports.invoke(&mut self.store, event, &self.input),
        }
    }
}

/// Classifies an error from wasm by its type (never by its text): the limiter's
/// [`MemoryCapExceeded`], an epoch interrupt, another trap, or anything else.
fn failure(store: &Store<HostState>, error: wasmtime::Error, timeout_ms: u64) -> HookFailure {
    if let Some(exceeded) = error.downcast_ref::<MemoryCapExceeded>() {
        return HookFailure::OutOfMemory {
            requested: exceeded.requested,
            cap: exceeded.cap,
        };
    }
    if let Some(requested) = store.data().memory_refused {
        return HookFailure::OutOfMemory {
            requested,
            cap: store.data().memory_cap,
        };
    }
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => HookFailure::Timeout { ms: timeout_ms },
        Some(trap) => HookFailure::Trap(trap.to_string()),
        None => HookFailure::Trap(error.to_string()),
    }
}

/// Starts a budget, counted from `started`, for what the store runs next, and the next epoch
/// tick asks the store's callback whether it has run out (see `ticker` and `budget`).
fn start_budget(store: &mut Store<HostState>, budget: Duration, started: Instant) {
    store.data_mut().budget = CallBudget::start_at(budget, started);
    store.set_epoch_deadline(1);
}
