//! How many wasm operators a hook call executes: wasmtime's fuel, which charges one unit
//! for nearly every operator. A measure of a hook's own work that does not move with the
//! machine's load, for comparing two builds of a hook (or of the guest SDK) on shared,
//! noisy machines where timings of a few percent drown. Not time: register moves count as
//! much as memory traffic, and host work (encoding the event, reading the answer) is not in
//! it. Used by the `hooks` benchmark (`--operators`).

use colloquy_protocol::hook::HookInput;
use colloquy_protocol::template::HookEvent;
use wasmtime::{Config, Engine, Module, Store};

use super::core::check_shape;
use super::host::{self, HostState};
use super::module::Instance;
use super::{HookFailure, MAX_MEMORY_BYTES};

/// Fuel for one call: far more than any hook under a real budget executes, and finite, so
/// a runaway module ends with an error instead of hanging the caller.
const FUEL: u64 = 10_000_000_000;

/// Operators executed by each of `calls` calls of `event` with `input` on one instance of
/// the module `wasm` (the first call usually differs: it initialises the guest's state).
/// The module is checked and called as the runtime checks and calls it.
pub fn per_call(
    wasm: &[u8],
    event: HookEvent,
    input: &HookInput<'_>,
    calls: usize,
) -> Result<Vec<u64>, HookFailure> {
    let wasm_error = |error: wasmtime::Error| HookFailure::Trap(error.to_string());
    let mut config = Config::new();
    config.consume_fuel(true);
    let engine = Engine::new(&config).map_err(wasm_error)?;
    let module =
        Module::new(&engine, wasm).map_err(|error| HookFailure::Compile(error.to_string()))?;
    let events = check_shape(&module)?;
    let linker = host::core_linker(&engine).map_err(wasm_error)?;
    let mut store = Store::new(
        &engine,
        HostState::new(
            MAX_MEMORY_BYTES,
            std::sync::Arc::new(colloquy_core::clock::SystemClock),
        ),
    );
    store.limiter(|state| state);
    store.set_fuel(FUEL).map_err(wasm_error)?;
    let instance = linker
        .instantiate(&mut store, &module)
        .map_err(|error| HookFailure::Instantiate(error.to_string()))?;
    let mut hook = Instance::core(store, &instance, events)?;
    let mut bytes = Vec::new();
    colloquy_core::hooks::input::encode(input, &mut bytes)
        .map_err(|error| HookFailure::BadOutput(format!("cannot encode the input: {error}")))?;
    let mut used = Vec::with_capacity(calls);
    for _ in 0..calls {
        hook.store_mut().set_fuel(FUEL).map_err(wasm_error)?;
        hook.call_once(event, &bytes)?;
        used.push(FUEL - hook.store_mut().get_fuel().map_err(wasm_error)?);
    }
    Ok(used)
}
