//! The epoch ticker: the thread that advances the wasmtime engine's epoch, which is how a
//! hook call's deadline is enforced. It ticks every [`EPOCH_TICK`] while wasm code runs (a
//! call, or a module being loaded) and on until [`IDLE_TICKS_BEFORE_PARKING`] ticks in a row
//! pass without any, then parks until the next one. So an engine whose templates use no
//! hooks, or whose hooks have not run for a while, spends no CPU waking up a thousand times
//! a second.
//!
//! Why not park as soon as nothing runs: a call lasts microseconds, so an engine whose calls
//! come a few milliseconds apart would find the ticker parked at every call and wake it on
//! the call's path (a futex call and a context switch). With calls 3 ms apart, that made
//! the trivial C hook's call take 9–20 µs instead of 3–6 µs (`--bench hooks --
//! --calls-only --spaced-ms 3`, several runs each). While the ticker is awake, starting a
//! call costs two atomic operations; the price is a thousand wake-ups a second of the
//! ticker thread for a tenth of a second after the last call.
//!
//! Deadlines stay exact: a store's epoch deadline counts ticks from the epoch at the moment
//! it is set, and the ticker is running before any wasm starts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{self, Thread};

use super::EPOCH_TICK;

/// Ticks the ticker goes on with after the last wasm execution ended before it parks: a
/// tenth of a second at one tick per millisecond.
pub const IDLE_TICKS_BEFORE_PARKING: u32 = 100;

/// Owns the ticker thread; stops it on drop.
pub struct EpochTicker {
    shared: Arc<Shared>,
    thread: Thread,
}

struct Shared {
    /// Wasm executions in progress.
    running: AtomicUsize,
    /// Wasm executions started so far (wrapping): the ticker tells from it whether any ran
    /// since its last tick, however short.
    started: AtomicUsize,
    stop: AtomicBool,
}

/// Keeps the ticker ticking while alive: hold one around any wasm execution.
pub struct Ticking<'a> {
    shared: &'a Shared,
}

impl EpochTicker {
    /// Starts the (parked) ticker thread for `engine`.
    pub fn start(engine: wasmtime::Engine) -> std::io::Result<EpochTicker> {
        let shared = Arc::new(Shared {
            running: AtomicUsize::new(0),
            started: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let state = shared.clone();
        let handle = thread::Builder::new()
            .name("hook-epoch-ticker".to_owned())
            .spawn(move || {
                let mut idle = IdleTicks::default();
                let mut seen = 0;
                while !state.stop.load(Ordering::Acquire) {
                    let started = state.started.load(Ordering::Relaxed);
                    let quiet = started == seen && state.running.load(Ordering::Acquire) == 0;
                    seen = started;
                    if idle.park_now(quiet) {
                        // Woken by the first `ticking` (an unpark before this park makes it
                        // return at once, so no wake-up is lost) or by drop.
                        thread::park();
                        continue;
                    }
                    thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })?;
        Ok(EpochTicker {
            shared,
            thread: handle.thread().clone(),
        })
    }

    /// Ticks until the returned guard is dropped.
    pub fn ticking(&self) -> Ticking<'_> {
        self.shared.started.fetch_add(1, Ordering::Relaxed);
        if self.shared.running.fetch_add(1, Ordering::AcqRel) == 0 {
            self.thread.unpark();
        }
        Ticking {
            shared: &self.shared,
        }
    }

    /// Whether some wasm execution holds the ticker awake.
    #[cfg(test)]
    pub fn is_ticking(&self) -> bool {
        self.shared.running.load(Ordering::Acquire) > 0
    }
}

/// Counts the ticks in a row during which no wasm ran, to tell the ticker when to park.
#[derive(Debug, Default)]
struct IdleTicks(u32);

impl IdleTicks {
    /// Before a tick: whether to park now, given whether the tick was quiet (nothing runs,
    /// and nothing started since the last tick).
    fn park_now(&mut self, quiet: bool) -> bool {
        if !quiet {
            self.0 = 0;
            return false;
        }
        if self.0 >= IDLE_TICKS_BEFORE_PARKING {
            self.0 = 0;
            return true;
        }
        self.0 += 1;
        false
    }
}

impl Drop for Ticking<'_> {
    fn drop(&mut self) {
        self.shared.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_advances_only_while_something_runs() {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = wasmtime::Engine::new(&config).expect("engine");
        let ticker = EpochTicker::start(engine.clone()).expect("ticker");
        // A store whose deadline is one tick away traps once the epoch moves.
        let mut store = wasmtime::Store::new(&engine, ());
        store.set_epoch_deadline(1);
        let wasm = wat::parse_str(r#"(module (func (export "spin") (loop (br 0))))"#).expect("wat");
        let module = wasmtime::Module::new(&engine, wasm).expect("module");
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).expect("instance");
        let spin = instance
            .get_typed_func::<(), ()>(&mut store, "spin")
            .expect("spin");
        assert!(!ticker.is_ticking());
        {
            let _ticking = ticker.ticking();
            assert!(ticker.is_ticking());
            // Without ticks this loop would never end; with them it is interrupted.
            let trap = spin.call(&mut store, ()).expect_err("interrupted");
            assert_eq!(
                trap.downcast_ref::<wasmtime::Trap>(),
                Some(&wasmtime::Trap::Interrupt)
            );
        }
        assert!(!ticker.is_ticking());
    }

    #[test]
    fn the_ticker_parks_only_after_a_run_of_idle_ticks() {
        let mut idle = IdleTicks::default();
        // Something runs: never park, and the idle count starts over.
        for _ in 0..1000 {
            assert!(!idle.park_now(false));
        }
        // Idle: tick on for the grace period, then park.
        for _ in 0..IDLE_TICKS_BEFORE_PARKING {
            assert!(!idle.park_now(true));
        }
        assert!(idle.park_now(true));
        // A call in the middle of an idle run starts the grace period over.
        for _ in 0..IDLE_TICKS_BEFORE_PARKING / 2 {
            assert!(!idle.park_now(true));
        }
        assert!(!idle.park_now(false));
        for _ in 0..IDLE_TICKS_BEFORE_PARKING {
            assert!(!idle.park_now(true));
        }
        assert!(idle.park_now(true));
    }
}
