//! The epoch ticker: the thread that advances the wasmtime engine's epoch, which is how a
//! hook call's budget is enforced.
//!
//! Every call runs with an epoch deadline one tick away and its budget in its store
//! ([`super::host::HostState::budget`]). When the epoch moves, each call in wasm at that
//! moment runs [`on_epoch`]: once it has spent its budget it is stopped (a
//! `Trap::Interrupt`); otherwise it asks the ticker for a tick at the earliest its budget
//! can end ([`TickerHandle::tick_at`]) and goes on. So a call is stopped within
//! [`TICK_SLACK`] of its budget (counted in CPU time, see `budget`), and a tick that finds a
//! call mid-way costs that call one clock read (two once its wall time is up).
//!
//! The ticker does not tick at that precision all the time. While calls come, it ticks
//! once per *period*, the shortest budget of the calls of the last [`PERIOD_WINDOW`] or so
//! (at least [`MIN_PERIOD`], at most the window itself, so that a call whose budget is longer
//! than the period remembers is still caught): a runaway call is caught by the first tick after it starts,
//! which then schedules the tick that stops it. The period follows the budgets both ways: a
//! call with a shorter budget than the period shortens it at once, and once no call with a
//! short budget has come for a window (its template was edited or removed), the period
//! grows back to the shortest budget still in use.
//!
//! Ticking every millisecond instead cost a loaded server (one core, a Rust hook on every
//! message over HTTP) about 1.5 µs of CPU per request and 7% of its hooked throughput: a
//! thousand wake-ups a second of a thread sharing the core.
//!
//! When no call has started for [`IDLE_BEFORE_PARKING`], the ticker parks until the next
//! one. It does not park as soon as nothing runs: a call lasts microseconds, and an engine
//! whose calls come a few milliseconds apart would find the ticker parked at every call and
//! wake it on the call's path (a futex call and a context switch; with calls 3 ms apart that
//! made the trivial C hook's call take 9–20 µs instead of 3–6 µs). While the ticker is
//! awake, starting a call costs two atomic additions and two loads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use super::budget::{CallBudget, Verdict};

/// The ticker never ticks more often than this while calls come (budgets are whole
/// milliseconds, so only a 1 ms budget makes it tick this often).
pub const MIN_PERIOD: Duration = Duration::from_millis(1);
/// How late past a call's end time the tick that stops it may come. A tick asked for that
/// the ticker's own next wake-up serves within this is left to it: a call caught by a
/// periodic tick just after it started ends about when the next periodic tick comes, and
/// waking the ticker for it would double its wake-ups under load.
pub const TICK_SLACK: Duration = Duration::from_millis(1);
/// How long no call may start before the ticker parks.
pub const IDLE_BEFORE_PARKING: Duration = Duration::from_millis(100);
/// How long the period remembers a budget: it is the shortest budget of the calls of the
/// current window and the one before.
pub const PERIOD_WINDOW: Duration = Duration::from_secs(1);

/// A time on the ticker's clock: nanoseconds since the ticker started.
type Nanos = u64;
/// "No time": no tick asked for, or the ticker parked.
const NEVER: Nanos = u64::MAX;

/// Owns the ticker thread; stops it on drop. Cheap to share through [`EpochTicker::handle`].
pub struct EpochTicker {
    handle: TickerHandle,
}

/// What calls use to keep the ticker going and to ask it for ticks.
#[derive(Clone)]
pub struct TickerHandle {
    shared: Arc<Shared>,
    thread: Thread,
}

struct Shared {
    origin: Instant,
    /// Wasm executions in progress.
    running: AtomicUsize,
    /// Wasm executions started so far (wrapping): the ticker tells from it whether any ran
    /// since it last looked, however short.
    started: AtomicUsize,
    /// The longest the ticker sleeps while calls come: the shortest budget of the calls of
    /// this window and the last.
    period: AtomicU64,
    /// The shortest budget of the calls of this window.
    window_shortest: AtomicU64,
    /// The earliest tick a call asked for.
    requested: AtomicU64,
    /// When the ticker will next wake by itself ([`NEVER`] while parked).
    next_wake: AtomicU64,
    /// Set while the ticker is parked (or about to): the next call unparks it.
    parked: AtomicBool,
    stop: AtomicBool,
}

impl Shared {
    fn now(&self) -> Nanos {
        nanos(self.origin.elapsed())
    }
}

fn nanos(duration: Duration) -> Nanos {
    u64::try_from(duration.as_nanos()).unwrap_or(NEVER - 1)
}

/// Keeps the ticker going while alive: hold one around any wasm execution.
pub struct Ticking<'a> {
    shared: &'a Shared,
}

impl EpochTicker {
    /// Starts the ticker thread for `engine`.
    pub fn start(engine: wasmtime::Engine) -> std::io::Result<EpochTicker> {
        let shared = Arc::new(Shared {
            origin: Instant::now(),
            running: AtomicUsize::new(0),
            started: AtomicUsize::new(0),
            period: AtomicU64::new(NEVER),
            window_shortest: AtomicU64::new(NEVER),
            requested: AtomicU64::new(NEVER),
            next_wake: AtomicU64::new(NEVER),
            parked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let state = shared.clone();
        let handle = thread::Builder::new()
            .name("hook-epoch-ticker".to_owned())
            .spawn(move || run(&state, &engine))?;
        Ok(EpochTicker {
            handle: TickerHandle {
                shared,
                thread: handle.thread().clone(),
            },
        })
    }

    /// A handle for the stores' epoch callbacks.
    pub fn handle(&self) -> &TickerHandle {
        &self.handle
    }

    /// Keeps the ticker going until the returned guard is dropped, for a call with this
    /// budget.
    pub fn ticking(&self, budget: Duration) -> Ticking<'_> {
        let shared = &*self.handle.shared;
        shared.started.fetch_add(1, Ordering::SeqCst);
        shared.running.fetch_add(1, Ordering::SeqCst);
        let budget = nanos(budget.max(MIN_PERIOD));
        // Loads first: in the steady state a call writes to neither.
        if budget < shared.window_shortest.load(Ordering::Relaxed) {
            shared.window_shortest.fetch_min(budget, Ordering::SeqCst);
        }
        // A budget shorter than the period: the ticker may be asleep for longer than it.
        let shorter = budget < shared.period.load(Ordering::Relaxed)
            && shared.period.fetch_min(budget, Ordering::SeqCst) > budget;
        // After `started` moved (SeqCst): either the ticker sees the call before it parks,
        // or this sees the flag and wakes it.
        let was_parked =
            shared.parked.load(Ordering::SeqCst) && shared.parked.swap(false, Ordering::SeqCst);
        if shorter || was_parked {
            self.handle.thread.unpark();
        }
        Ticking { shared }
    }

    /// Whether some wasm execution holds the ticker awake.
    #[cfg(test)]
    pub fn is_ticking(&self) -> bool {
        self.handle.shared.running.load(Ordering::Acquire) > 0
    }
}

impl TickerHandle {
    /// Asks for a tick at `at` (at most [`TICK_SLACK`] later), waking the ticker if it would
    /// sleep longer than that.
    pub fn tick_at(&self, at: Instant) {
        let shared = &*self.shared;
        let at = nanos(at.saturating_duration_since(shared.origin));
        shared.requested.fetch_min(at, Ordering::SeqCst);
        if at.saturating_add(nanos(TICK_SLACK)) < shared.next_wake.load(Ordering::SeqCst) {
            self.thread.unpark();
        }
    }
}

/// A store's epoch deadline callback: stop the call once it has spent its budget, or let it
/// go on to the next tick, which it asks for at the earliest its budget can end.
pub fn on_epoch(ticker: &TickerHandle, budget: &CallBudget) -> wasmtime::UpdateDeadline {
    match budget.check(Instant::now()) {
        Verdict::Spent => wasmtime::UpdateDeadline::Interrupt,
        Verdict::NotBefore(at) => {
            ticker.tick_at(at);
            wasmtime::UpdateDeadline::Continue(1)
        }
    }
}

/// The ticker thread's loop.
fn run(shared: &Shared, engine: &wasmtime::Engine) {
    let mut seen = shared.started.load(Ordering::SeqCst);
    let mut last_tick = shared.now();
    let mut last_busy = last_tick;
    let mut window_start = last_tick;
    while !shared.stop.load(Ordering::Acquire) {
        let now = shared.now();
        if now.saturating_sub(window_start) >= nanos(PERIOD_WINDOW) {
            start_window(shared);
            window_start = now;
        }
        let started = shared.started.load(Ordering::SeqCst);
        if started != seen || shared.running.load(Ordering::SeqCst) > 0 {
            seen = started;
            last_busy = now;
        } else if now.saturating_sub(last_busy) >= nanos(IDLE_BEFORE_PARKING) {
            park_until_a_call(shared, seen);
            last_busy = shared.now();
            last_tick = last_busy;
            continue;
        }
        // A call's first tick must come within its budget: the period remembers a budget for
        // a window or two, which covers budgets up to a window; for longer ones, a tick at
        // least once a window does. (Without it, calls of 2 s that started after the ticker
        // had parked outlived the period's memory before their first tick, and ran for ever.)
        let period = shared
            .period
            .load(Ordering::SeqCst)
            .min(nanos(PERIOD_WINDOW));
        let due = last_tick
            .saturating_add(period)
            .min(shared.requested.load(Ordering::SeqCst));
        if now >= due {
            engine.increment_epoch();
            last_tick = now;
            // Requests up to now are served; a later one stays.
            let _ = shared
                .requested
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |at| {
                    (at <= now).then_some(NEVER)
                });
            continue;
        }
        // Sleep until it is due, or until the idle time runs out (whichever comes first).
        let wake = due.min(last_busy.saturating_add(nanos(IDLE_BEFORE_PARKING)));
        shared.next_wake.store(wake, Ordering::SeqCst);
        // A tick asked for in between (before `next_wake` was stored) is seen here.
        if shared.requested.load(Ordering::SeqCst) < wake {
            continue;
        }
        // Woken early by `tick_at`, a shorter budget, a stale unpark or spuriously: the loop
        // works out again what is due.
        thread::park_timeout(Duration::from_nanos(wake.saturating_sub(now)));
    }
}

/// Starts a budget window: the period becomes the shortest budget of the window that ends
/// and of the calls that started since (never, when none came: the next call sets it).
fn start_window(shared: &Shared) {
    let ended = shared.window_shortest.swap(NEVER, Ordering::SeqCst);
    shared.period.store(ended, Ordering::SeqCst);
    // A call that started after the swap may have shortened the period just before the
    // store: it is in the new window, so the period still covers it. (One that starts later
    // lowers the period itself.)
    shared.period.fetch_min(
        shared.window_shortest.load(Ordering::SeqCst),
        Ordering::SeqCst,
    );
}

/// Parks the ticker until a call starts (or the ticker is dropped). `seen` is the start
/// count when it last saw one.
fn park_until_a_call(shared: &Shared, seen: usize) {
    shared.next_wake.store(NEVER, Ordering::SeqCst);
    shared.parked.store(true, Ordering::SeqCst);
    // Looked at again after raising the flag: a call that started before it was up is seen
    // here; one that starts after sees the flag and unparks.
    while shared.parked.load(Ordering::SeqCst)
        && shared.started.load(Ordering::SeqCst) == seen
        && shared.running.load(Ordering::SeqCst) == 0
        && !shared.stop.load(Ordering::Acquire)
    {
        thread::park();
    }
    shared.parked.store(false, Ordering::SeqCst);
}

impl Drop for Ticking<'_> {
    fn drop(&mut self) {
        self.shared.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.handle.shared.stop.store(true, Ordering::Release);
        self.handle.thread.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> wasmtime::Engine {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        wasmtime::Engine::new(&config).expect("engine")
    }

    /// A store whose data is its call's budget, checked at each tick as the runtime does.
    fn store(engine: &wasmtime::Engine, ticker: &EpochTicker) -> wasmtime::Store<CallBudget> {
        let mut store = wasmtime::Store::new(engine, CallBudget::start(Duration::ZERO));
        let handle = ticker.handle().clone();
        store.epoch_deadline_callback(move |context| Ok(on_epoch(&handle, context.data())));
        store
    }

    /// Runs an endless loop with `budget`, as the runtime runs a call (its epoch callback,
    /// a [`Ticking`] guard), and returns how long it ran before it was interrupted.
    fn endless_call(engine: &wasmtime::Engine, ticker: &EpochTicker, budget: Duration) -> Duration {
        let mut store = store(engine, ticker);
        let wasm = wat::parse_str(r#"(module (func (export "spin") (loop (br 0))))"#).expect("wat");
        let module = wasmtime::Module::new(engine, wasm).expect("module");
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).expect("instance");
        let spin = instance
            .get_typed_func::<(), ()>(&mut store, "spin")
            .expect("spin");
        let _ticking = ticker.ticking(budget);
        assert!(ticker.is_ticking());
        let started = Instant::now();
        *store.data_mut() = CallBudget::start(budget);
        store.set_epoch_deadline(1);
        // Without ticks this loop would never end (the test would hang); with them it is
        // interrupted.
        let trap = spin.call(&mut store, ()).expect_err("interrupted");
        assert_eq!(
            trap.downcast_ref::<wasmtime::Trap>(),
            Some(&wasmtime::Trap::Interrupt)
        );
        started.elapsed()
    }

    #[test]
    fn an_endless_call_is_stopped_once_its_budget_is_spent() {
        let engine = engine();
        let ticker = EpochTicker::start(engine.clone()).expect("ticker");
        assert!(!ticker.is_ticking());
        let budget = Duration::from_millis(30);
        // Not before its budget (an upper bound would be a timed assertion).
        assert!(endless_call(&engine, &ticker, budget) >= budget);
        assert!(!ticker.is_ticking());
    }

    /// The budget counts the time the call's thread runs, not the time the OS keeps it
    /// waiting: a call whose thread sleeps past its budget (as a thread of a loaded machine
    /// waits for a core) and then runs briefly is not stopped.
    #[test]
    fn time_the_thread_does_not_run_is_not_counted_against_a_call() {
        let engine = engine();
        let ticker = EpochTicker::start(engine.clone()).expect("ticker");
        let mut store = store(&engine, &ticker);
        let budget = Duration::from_millis(10);
        let mut linker = wasmtime::Linker::new(&engine);
        linker
            .func_wrap("test", "off-core", move || thread::sleep(3 * budget))
            .expect("import");
        // Waits off the core, then counts to 100 000 (well under a millisecond): the loop's
        // back edges are where a tick that came during the wait is noticed.
        let wasm = wat::parse_str(
            r#"(module
                 (import "test" "off-core" (func $off_core))
                 (func (export "run") (local $n i32)
                   (call $off_core)
                   (loop $count
                     (local.set $n (i32.add (local.get $n) (i32.const 1)))
                     (br_if $count (i32.lt_u (local.get $n) (i32.const 100000))))))"#,
        )
        .expect("wat");
        let module = wasmtime::Module::new(&engine, wasm).expect("module");
        let instance = linker.instantiate(&mut store, &module).expect("instance");
        let run = instance
            .get_typed_func::<(), ()>(&mut store, "run")
            .expect("run");
        let _ticking = ticker.ticking(budget);
        *store.data_mut() = CallBudget::start(budget);
        store.set_epoch_deadline(1);
        let started = Instant::now();
        run.call(&mut store, ()).expect("not stopped");
        assert!(started.elapsed() >= 3 * budget);
    }

    #[test]
    fn a_call_with_a_shorter_budget_than_any_before_is_stopped() {
        let engine = engine();
        let ticker = EpochTicker::start(engine.clone()).expect("ticker");
        // A long budget first: the ticker's period becomes a minute, and it sleeps.
        drop(ticker.ticking(Duration::from_secs(60)));
        thread::sleep(Duration::from_millis(5));
        // Stopped at its own budget, not at the next tick a minute away.
        let budget = Duration::from_millis(20);
        assert!(endless_call(&engine, &ticker, budget) >= budget);
    }

    /// Once calls with a short budget stop coming, the period grows back to the budget of
    /// the calls that still come.
    #[test]
    fn the_period_grows_back_when_short_budgets_stop_coming() {
        let engine = engine();
        let ticker = EpochTicker::start(engine.clone()).expect("ticker");
        let period = || Duration::from_nanos(ticker.handle.shared.period.load(Ordering::SeqCst));
        drop(ticker.ticking(Duration::from_millis(1)));
        assert_eq!(period(), Duration::from_millis(1));
        let long = Duration::from_millis(50);
        // Calls with the long budget keep coming (the ticker stays awake); within a few
        // windows the period is theirs. Bounded: the test fails rather than hangs.
        let give_up = Instant::now() + 20 * PERIOD_WINDOW;
        while period() != long {
            assert!(
                Instant::now() < give_up,
                "the period stayed at {:?}",
                period()
            );
            drop(ticker.ticking(long));
            thread::sleep(Duration::from_millis(10));
        }
        // And a shorter budget shortens it again at once.
        drop(ticker.ticking(Duration::from_millis(2)));
        assert_eq!(period(), Duration::from_millis(2));
    }

    #[test]
    fn a_call_after_the_ticker_parked_wakes_it() {
        let engine = engine();
        let ticker = EpochTicker::start(engine.clone()).expect("ticker");
        drop(ticker.ticking(Duration::from_millis(10)));
        // Idle long enough for the ticker to park.
        while !ticker.handle.shared.parked.load(Ordering::SeqCst) {
            thread::sleep(IDLE_BEFORE_PARKING);
        }
        let budget = Duration::from_millis(10);
        assert!(endless_call(&engine, &ticker, budget) >= budget);
    }
}
