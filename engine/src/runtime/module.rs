//! One hook module: compiled, link-checked, pre-instantiated, with its idle instances; and
//! the ABI v1 calling convention (the canonical ABI lowering of `func(string) -> string`).

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use colloquy_policy::compiled::HookModule;
use colloquy_protocol::hook::{
    HOOKS_ABI_VERSION, HOST_MODULE, HookInput, HookOutput, SUPPORTED_ABI_VERSIONS,
};
use colloquy_protocol::template::HookEvent;
use wasmtime::{
    Engine, ExternType, InstancePre, Linker, Memory, Module, Store, Trap, TypedFunc, ValType,
};

use super::budget::CallBudget;
use super::host::{HOST_FUNCTIONS, HostState, MemoryCapExceeded};
use super::ticker::{self, TickerHandle};
use super::{HookFailure, MAX_OUTPUT_BYTES, cache, event_name};

/// Budget of the `hooks_abi_version` call made at load time (it returns a constant), and of
/// instantiation (start function and data initialisers).
pub(super) const VERSION_CALL_BUDGET: Duration = Duration::from_millis(100);
/// An instance keeps the buffer its events are encoded in between calls, unless an event
/// made it grow past this.
const KEEP_INPUT_CAPACITY: usize = 64 * 1024;

/// The three event exports, in [`event_index`] order.
const EVENT_EXPORTS: [&str; 3] = ["start", "message", "timeout"];
/// Their post-return exports.
const POST_EXPORTS: [&str; 3] = ["cabi_post_start", "cabi_post_message", "cabi_post_timeout"];

fn event_index(event: HookEvent) -> usize {
    match event {
        HookEvent::OnStart => 0,
        HookEvent::OnMessage => 1,
        HookEvent::OnTimeout => 2,
    }
}

/// A module ready to instantiate.
pub struct LoadedModule {
    /// Set once a call tried on an async worker ran past [`super::INLINE_SLICE`]: from then
    /// on its calls run on the hook pool only.
    pub(super) pooled: std::sync::atomic::AtomicBool,
    pre: InstancePre<HostState>,
    /// Which of `start`, `message`, `timeout` it exports.
    events: [bool; 3],
    /// Instances waiting for the next call.
    idle: Mutex<Vec<Instance>>,
}

/// A live instance and its typed exports.
pub(super) struct Instance {
    store: Store<HostState>,
    memory: Memory,
    realloc: TypedFunc<(i32, i32, i32, i32), i32>,
    version: TypedFunc<(), i32>,
    events: [Option<TypedFunc<(i32, i32), i32>>; 3],
    posts: [Option<TypedFunc<i32, ()>>; 3],
    /// The JSON of the event being passed, reused from call to call.
    input: Vec<u8>,
}

impl LoadedModule {
    /// Compiles (or reads from the AOT cache), checks the module's shape against ABI v1, and
    /// asks it its ABI version.
    pub fn load(
        engine: &Engine,
        ticker: &TickerHandle,
        linker: &Linker<HostState>,
        source: &HookModule,
        cache_dir: Option<&Path>,
    ) -> Result<LoadedModule, HookFailure> {
        let module = cache::compile(engine, source, cache_dir)?;
        let events = check_shape(&module)?;
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|error| HookFailure::Link(error.to_string()))?;
        let loaded = LoadedModule {
            pooled: std::sync::atomic::AtomicBool::new(false),
            pre,
            events,
            idle: Mutex::new(Vec::new()),
        };
        let mut probe = loaded.instantiate(engine, ticker, super::MAX_MEMORY_BYTES)?;
        start_budget(&mut probe.store, VERSION_CALL_BUDGET, Instant::now());
        let version = probe.version.call(&mut probe.store, ()).map_err(|error| {
            failure(&probe.store, error, VERSION_CALL_BUDGET.as_millis() as u64)
        })?;
        if !SUPPORTED_ABI_VERSIONS.contains(&(version as u32)) || version < 0 {
            return Err(HookFailure::AbiVersion {
                found: i64::from(version),
                supported: SUPPORTED_ABI_VERSIONS
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Ok(loaded)
    }

    /// How many instances wait for a call.
    #[cfg(test)]
    pub fn idle_count(&self) -> usize {
        self.idle.lock().map(|idle| idle.len()).unwrap_or(0)
    }

    /// Fails when the module lacks the export for `event`.
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

    /// One call: input in, output out, on an idle instance (or a new one). The instance goes
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
    ) -> Result<HookOutput, HookFailure> {
        let reused = self
            .idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .pop();
        let (mut instance, started) = match reused {
            // An instance grown under a larger cap (another template, same module) is over
            // this one's: start afresh rather than let it keep memory it may not have.
            Some(instance) if (instance.memory.data_size(&instance.store) as u64) <= cap => {
                (instance, started)
            }
            // The call's budget starts after the instantiation (which has its own).
            _ => (self.instantiate(engine, ticker, cap)?, Instant::now()),
        };
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
        super::input::encode(input, &mut instance.input)
            .map_err(|error| HookFailure::BadOutput(format!("cannot encode the input: {error}")))?;
        instance.store.data_mut().budget =
            CallBudget::start_with_margin(Duration::from_millis(budget_ms), started, wall_margin);
        instance.store.set_epoch_deadline(1);
        let output = instance.invoke(event).map_err(|error| match error {
            Invoke::Wasm(error) => failure(&instance.store, error, budget_ms),
            Invoke::Failure(failure) => failure,
        })?;
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if idle.len() < max_idle {
            idle.push(instance);
        }
        drop(idle);
        output
    }

    fn instantiate(
        &self,
        engine: &Engine,
        ticker: &TickerHandle,
        cap: u64,
    ) -> Result<Instance, HookFailure> {
        let mut store = Store::new(engine, HostState::new(cap));
        store.limiter(|state| state);
        let ticker = ticker.clone();
        store.epoch_deadline_callback(move |store| {
            Ok(ticker::on_epoch(&ticker, &store.data().budget))
        });
        // Instantiation runs the start function and data initialisers: give it a budget too.
        start_budget(&mut store, VERSION_CALL_BUDGET, Instant::now());
        let instance = self
            .pre
            .instantiate(&mut store)
            .map_err(|error| match error.downcast_ref::<MemoryCapExceeded>() {
                Some(exceeded) => HookFailure::OutOfMemory {
                    requested: exceeded.requested,
                    cap: exceeded.cap,
                },
                None => HookFailure::Instantiate(error.to_string()),
            })?;
        Instance::new(store, &instance, self.events)
    }
}

/// What went wrong inside [`Instance::invoke`].
enum Invoke {
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
    /// An instance's typed exports, for the event exports `events` says the module has
    /// (as [`check_shape`] found them).
    pub(super) fn new(
        mut store: Store<HostState>,
        instance: &wasmtime::Instance,
        events: [bool; 3],
    ) -> Result<Instance, HookFailure> {
        let link = |error: wasmtime::Error| HookFailure::Link(error.to_string());
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| HookFailure::Link("no `memory` export".to_owned()))?;
        let realloc = instance
            .get_typed_func(&mut store, "cabi_realloc")
            .map_err(link)?;
        let version = instance
            .get_typed_func(&mut store, "hooks_abi_version")
            .map_err(link)?;
        let mut exports = [None, None, None];
        let mut posts = [None, None, None];
        for index in 0..3 {
            if events[index] {
                exports[index] = Some(
                    instance
                        .get_typed_func(&mut store, EVENT_EXPORTS[index])
                        .map_err(link)?,
                );
                posts[index] = instance
                    .get_typed_func(&mut store, POST_EXPORTS[index])
                    .ok();
            }
        }
        Ok(Instance {
            store,
            memory,
            realloc,
            version,
            events: exports,
            posts,
            input: Vec::new(),
        })
    }

    /// One call on `input` (the event's JSON), as [`LoadedModule::call`] makes it but without
    /// budget or reuse: for [`super::operators`], whose engine counts fuel instead.
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

    /// The canonical ABI dance: allocate the input (`self.input`) in guest memory (the guest
    /// owns it from then on), call the export, read `[ptr, len]` at the returned pointer,
    /// parse the output where it lies, then let the guest free it with `cabi_post_<name>`.
    /// The outer error is the instance's (it is discarded); the inner one, bad output, is the
    /// hook's answer's (the instance is fine).
    fn invoke(&mut self, event: HookEvent) -> Result<Result<HookOutput, HookFailure>, Invoke> {
        let index = event_index(event);
        // Fields borrowed one by one: the typed functions are used in place, not cloned
        // (a clone bumps reference counts in wasmtime's type registry).
        let Instance {
            store,
            memory,
            realloc,
            events,
            posts,
            input,
            ..
        } = self;
        let func = events[index].as_ref().ok_or_else(|| {
            Invoke::Failure(HookFailure::MissingEvent {
                event: event_name(event),
                export: EVENT_EXPORTS[index],
            })
        })?;
        let len = i32::try_from(input.len())
            .map_err(|_| Invoke::Failure(HookFailure::BadOutput("input over 2 GiB".into())))?;
        let ptr = realloc.call(&mut *store, (0, 0, 1, len))?;
        memory
            .write(&mut *store, ptr as u32 as usize, input)
            .map_err(|_| bad_pointer("cabi_realloc returned a pointer outside memory"))?;
        let retptr = func.call(&mut *store, (ptr, len))?;
        let mut pair = [0u8; 8];
        memory
            .read(&*store, retptr as u32 as usize, &mut pair)
            .map_err(|_| bad_pointer("the return pointer is outside memory"))?;
        let out_ptr = u32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]) as usize;
        let out_len = u32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]) as usize;
        if out_len > MAX_OUTPUT_BYTES {
            return Err(Invoke::Failure(HookFailure::OutputTooLarge {
                len: out_len as u64,
                max: MAX_OUTPUT_BYTES,
            }));
        }
        // Parsed in guest memory (no copy): the output is owned data, and the guest may
        // reuse the block only after `cabi_post_*`.
        let answer = out_ptr
            .checked_add(out_len)
            .and_then(|end| memory.data(&*store).get(out_ptr..end))
            .ok_or_else(|| bad_pointer("the output is outside memory"))?;
        let Some(post) = &posts[index] else {
            return Ok(super::output::parse(answer));
        };
        // Reading the answer is the host's time, not the hook's (see `budget`).
        let parsing = Instant::now();
        let output = super::output::parse(answer);
        store.data_mut().budget.exclude(parsing.elapsed());
        post.call(&mut *store, retptr)?;
        Ok(output)
    }
}

fn bad_pointer(what: &str) -> Invoke {
    Invoke::Failure(HookFailure::BadOutput(what.to_owned()))
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

/// Checks exports and imports against ABI v1; returns which event exports exist.
pub(super) fn check_shape(module: &Module) -> Result<[bool; 3], HookFailure> {
    let i32_ = || ValType::I32;
    let expect_func = |name: &str, params: &[ValType], results: &[ValType]| {
        let Some(ty) = module.get_export(name) else {
            return Err(HookFailure::Link(format!("no `{name}` export")));
        };
        let ExternType::Func(func) = ty else {
            return Err(HookFailure::Link(format!("`{name}` is not a function")));
        };
        let fits = func.params().len() == params.len()
            && func.results().len() == results.len()
            && func.params().zip(params).all(|(a, b)| ValType::eq(&a, b))
            && func.results().zip(results).all(|(a, b)| ValType::eq(&a, b));
        if fits {
            Ok(())
        } else {
            Err(HookFailure::Link(format!(
                "`{name}` has type {func}, expected {}",
                signature(params, results)
            )))
        }
    };
    match module.get_export("memory") {
        Some(ExternType::Memory(memory)) if !memory.is_64() => {}
        Some(ExternType::Memory(_)) => {
            return Err(HookFailure::Link(
                "`memory` is a 64-bit memory; ABI v1 uses a 32-bit one".into(),
            ));
        }
        _ => return Err(HookFailure::Link("no `memory` export".into())),
    }
    expect_func("hooks_abi_version", &[], &[i32_()]).map_err(|failure| match failure {
        HookFailure::Link(detail) => HookFailure::Link(format!(
            "{detail} (a hook module exports `hooks_abi_version: () -> i32` returning \
             {HOOKS_ABI_VERSION})"
        )),
        other => other,
    })?;
    expect_func("cabi_realloc", &[i32_(), i32_(), i32_(), i32_()], &[i32_()])?;
    let mut events = [false; 3];
    for (index, name) in EVENT_EXPORTS.iter().enumerate() {
        if module.get_export(name).is_some() {
            expect_func(name, &[i32_(), i32_()], &[i32_()])?;
            events[index] = true;
            if module.get_export(POST_EXPORTS[index]).is_some() {
                expect_func(POST_EXPORTS[index], &[i32_()], &[])?;
            }
        }
    }
    if events == [false; 3] {
        return Err(HookFailure::Link(
            "it exports none of `start`, `message`, `timeout`".into(),
        ));
    }
    for import in module.imports() {
        if import.module() != HOST_MODULE || !HOST_FUNCTIONS.contains(&import.name()) {
            return Err(HookFailure::Link(format!(
                "it imports `{}::{}`; hooks may import only {} from `{HOST_MODULE}`",
                import.module(),
                import.name(),
                HOST_FUNCTIONS
                    .iter()
                    .map(|name| format!("`{name}`"))
                    .collect::<Vec<_>>()
                    .join(" and ")
            )));
        }
    }
    Ok(events)
}

fn signature(params: &[ValType], results: &[ValType]) -> String {
    let list = |types: &[ValType]| {
        types
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("({}) -> ({})", list(params), list(results))
}
