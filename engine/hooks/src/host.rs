//! What a hook instance's store holds, the limiter that caps its memory, and the host
//! functions of `colloquy:hooks/host@1.0.0` (`log`, `now-ms`).

use std::sync::Arc;
use std::time::Duration;

use colloquy_core::clock::Clock;

use colloquy_protocol::hook::HOST_MODULE;
use wasmtime::{Caller, Engine, Linker, ResourceLimiter};

use super::MAX_TABLE_ELEMENTS;
use super::budget::CallBudget;
use colloquy_core::log_safe::OneLine;

/// Longest line a hook may log through `log`; longer lines are cut (not refused: logging
/// must never fail a hook).
pub const MAX_LOG_LINE_BYTES: usize = 4096;
/// Lines a hook may log per call through `log`; the rest are dropped, counted in one warning.
pub const MAX_LOG_LINES_PER_CALL: u32 = 64;

/// The host import names, for link checks and messages.
pub const HOST_FUNCTIONS: &[&str] = &["log", "now-ms"];

/// The data of one instance's store.
pub struct HostState {
    /// The memory cap of the template the instance currently serves.
    pub memory_cap: u64,
    /// What the guest asked for when it hit the cap (reported instead of a bare trap).
    pub memory_refused: Option<u64>,
    /// The linear memory the instance holds, all its memories together (a component may
    /// have several: an interpreter's, an adapter's); the cap applies to this sum.
    pub memory_bytes: u64,
    /// The conversation the current call is about (for `log`).
    pub conversation: Arc<str>,
    /// Lines logged in the current call.
    pub lines_logged: u32,
    /// The current call's time budget (see `budget`).
    pub budget: CallBudget,
    /// What `now-ms` reads: the engine's clock, so hooks in template tests and replay see
    /// the test clock, not the wall clock.
    pub clock: Arc<dyn Clock>,
}

impl HostState {
    /// A fresh state with a memory cap, whose `now-ms` reads `clock`.
    pub fn new(memory_cap: u64, clock: Arc<dyn Clock>) -> HostState {
        HostState {
            clock,
            memory_cap,
            memory_refused: None,
            memory_bytes: 0,
            conversation: Arc::from(""),
            lines_logged: 0,
            budget: CallBudget::start(Duration::ZERO),
        }
    }
}

/// The guest asked for more memory than its cap. Raised from the limiter, so the guest traps
/// at once (a `memory.grow` returning -1 would leave a C guest writing through a null
/// pointer); the runtime downcasts to this type to report the cause.
#[derive(Debug, thiserror::Error)]
#[error("memory cap of {cap} bytes exceeded (asked for {requested})")]
pub struct MemoryCapExceeded {
    /// Bytes asked for.
    pub requested: u64,
    /// The cap.
    pub cap: u64,
}

impl ResourceLimiter for HostState {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Memories are created at their initial size by a call from 0, so the sum counts
        // every memory of the instance.
        let requested = self
            .memory_bytes
            .saturating_sub(current as u64)
            .saturating_add(desired as u64);
        if requested > self.memory_cap {
            self.memory_refused = Some(requested);
            return Err(wasmtime::Error::new(MemoryCapExceeded {
                requested,
                cap: self.memory_cap,
            }));
        }
        self.memory_bytes = requested;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// The linker of core modules, with the host functions; shared by every module.
pub fn core_linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    linker.func_wrap(HOST_MODULE, "log", log)?;
    linker.func_wrap(
        HOST_MODULE,
        "now-ms",
        |caller: Caller<'_, HostState>| -> i64 { caller.data().clock.now_ms() as i64 },
    )?;
    Ok(linker)
}

/// The linker of components: the same functions as the `colloquy:hooks/host@1.0.0`
/// instance, lifted by wasmtime (a `log-level` enum and a string; a `u64`).
pub fn component_linker(
    engine: &Engine,
) -> wasmtime::Result<wasmtime::component::Linker<HostState>> {
    use wasmtime::component::Val;
    let mut linker = wasmtime::component::Linker::new(engine);
    let mut host = linker.instance(HOST_MODULE)?;
    host.func_new("log", |mut store, _ty, params: &[Val], _results| {
        let level = match params.first() {
            Some(Val::Enum(level)) => match level.as_str() {
                "debug" => 0,
                "warn" => 2,
                "error" => 3,
                _ => 1,
            },
            _ => 1,
        };
        let line = match params.get(1) {
            Some(Val::String(line)) => line.as_str(),
            _ => "",
        };
        log_line(store.data_mut(), level, line.as_bytes());
        Ok(())
    })?;
    host.func_wrap("now-ms", |store, (): ()| Ok((store.data().clock.now_ms(),)))?;
    Ok(linker)
}

/// `log(level, ptr, len)`: a UTF-8 line from guest memory into tracing, with the
/// conversation id. Levels: 0 debug, 1 info, 2 warn, 3 error (the WIT enum `log-level`);
/// anything else logs at info. A bad pointer is the guest's bug and traps it.
fn log(mut caller: Caller<'_, HostState>, level: i32, ptr: i32, len: i32) -> wasmtime::Result<()> {
    let memory = caller
        .get_export("memory")
        .and_then(|export| export.into_memory())
        .ok_or_else(|| wasmtime::Error::msg("`log` called by a module without a memory"))?;
    let start = ptr as u32 as usize;
    let len = len as u32 as usize;
    let data = memory.data(&caller);
    let bytes = start
        .checked_add(len)
        .and_then(|end| data.get(start..end))
        .ok_or_else(|| wasmtime::Error::msg("`log` line is outside the module's memory"))?;
    let line = bytes[..len.min(MAX_LOG_LINE_BYTES)].to_vec();
    log_line(caller.data_mut(), level, &line);
    Ok(())
}

/// Logs one line of a hook (cut at [`MAX_LOG_LINE_BYTES`]), up to
/// [`MAX_LOG_LINES_PER_CALL`] a call.
fn log_line(state: &mut HostState, level: i32, bytes: &[u8]) {
    let shown = &bytes[..bytes.len().min(MAX_LOG_LINE_BYTES)];
    let line = String::from_utf8_lossy(shown);
    state.lines_logged += 1;
    if state.lines_logged > MAX_LOG_LINES_PER_CALL {
        if state.lines_logged == MAX_LOG_LINES_PER_CALL + 1 {
            tracing::warn!(conversation = %state.conversation, "hook logs too much; further lines of this call dropped");
        }
        return;
    }
    let conversation = &state.conversation;
    let line = OneLine(&line);
    match level {
        0 => tracing::debug!(target: "colloquy::hook", conversation = %conversation, "{line}"),
        2 => tracing::warn!(target: "colloquy::hook", conversation = %conversation, "{line}"),
        3 => tracing::error!(target: "colloquy::hook", conversation = %conversation, "{line}"),
        _ => tracing::info!(target: "colloquy::hook", conversation = %conversation, "{line}"),
    }
}
