//! Where the steps of conversations whose template has a wasm hook are worked: threads of
//! their own, never the async workers that serve HTTP, streams and the scheduler.
//!
//! A hook call is synchronous CPU work of up to its template's budget. Run on an async worker,
//! it holds that worker for the whole call: on a two-core machine three hooks that ran to a
//! 4 s budget at once left no worker for anything else, and every other request waited
//! (issue 32). A step whose hook once ran past `colloquy_hooks::INLINE_SLICE` on an async
//! worker (the engine tries there first: usual hooks take microseconds, and the crossing
//! costs ~45 µs) runs here instead, on a pool thread, while the request's task waits without
//! holding a worker.
//!
//! The pool is bounded both ways:
//! - [`HookPoolConfig::threads`] threads, more than the cores by default, so that a few hooks
//!   running to their budget do not keep the others' calls waiting (each call is stopped
//!   once its budget is spent, in CPU time or, at most `colloquy_hooks::WALL_MARGIN` later,
//!   in wall time);
//! - a queue of [`HookPoolConfig::queue`] steps; past it, a step is refused at once with
//!   [`HookPoolBusy::QueueFull`], and a step that waited longer than
//!   [`HookPoolConfig::max_wait`] for a thread is refused unrun ([`HookPoolBusy::Waited`]).
//!   Both reach a caller as `503 hooks_busy` with `Retry-After`: nothing was recorded;
//! - at most [`HookPoolConfig::per_template`] steps of one template in the pool (running or
//!   queued) at once; the others wait outside it, so a template whose hooks all run to their
//!   budgets leaves the rest of the threads and the queue to other templates.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

/// Threads per core by default: hook calls that run to their budget are what the pool must
/// absorb, and each of them waits on its budget, not on a core.
pub const DEFAULT_THREADS_PER_CORE: usize = 4;
/// Steps waiting for a thread, by default: enough for a burst of a thousand concurrent
/// hooked messages, whose calls take microseconds each.
pub const DEFAULT_QUEUE: usize = 1024;
/// How long a step may wait for a thread before it is refused unrun, by default. A step that
/// waited this long is behind hooks that run to their budgets; answering "busy, retry" beats
/// an answer later than any caller waits for.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(2);

/// How a [`HookPool`] is sized.
#[derive(Clone, Debug)]
pub struct HookPoolConfig {
    /// Threads that run steps.
    pub threads: usize,
    /// Steps that may wait for a thread.
    pub queue: usize,
    /// How long a step may wait for a thread.
    pub max_wait: Duration,
    /// Steps of one template in the pool at once.
    pub per_template: usize,
}

impl Default for HookPoolConfig {
    fn default() -> HookPoolConfig {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        HookPoolConfig::with_threads(cores * DEFAULT_THREADS_PER_CORE)
    }
}

impl HookPoolConfig {
    /// The default sizes around `threads` threads: one template may have half of them.
    pub fn with_threads(threads: usize) -> HookPoolConfig {
        HookPoolConfig {
            threads,
            queue: DEFAULT_QUEUE,
            max_wait: DEFAULT_MAX_WAIT,
            per_template: (threads / 2).max(1),
        }
    }
}

/// Why the pool did not run a step. Nothing of the step happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HookPoolBusy {
    /// Every thread is busy and the queue is full.
    #[error("the hook pool's queue of {0} steps is full; retry shortly")]
    QueueFull(usize),
    /// The step waited longer than the pool's limit for a thread.
    #[error("the step waited over {0:?} for a hook thread; retry shortly")]
    Waited(Duration),
    /// The pool has stopped (the engine is shutting down), or the step panicked.
    #[error("the hook pool did not run the step")]
    Lost,
}

/// A step to run, told how long it waited for a thread (it is not run past its limit).
type Job = Box<dyn FnOnce(Duration) + Send>;

struct Queued {
    job: Job,
    queued_at: Instant,
}

/// The pool; its threads end when it is dropped (after the steps they run).
pub struct HookPool {
    sender: SyncSender<Queued>,
    config: HookPoolConfig,
    /// Each template's share of the pool, created at its first step (templates are few, and
    /// only an administrator adds them).
    shares: Mutex<HashMap<Arc<str>, Arc<Semaphore>>>,
}

impl std::fmt::Debug for HookPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookPool")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl HookPool {
    /// Starts the pool's threads.
    pub fn start(config: HookPoolConfig) -> std::io::Result<HookPool> {
        let (sender, receiver) = sync_channel::<Queued>(config.queue.max(1));
        let receiver = Arc::new(Mutex::new(receiver));
        for index in 0..config.threads.max(1) {
            let receiver = receiver.clone();
            std::thread::Builder::new()
                .name(format!("hook-{index}"))
                .spawn(move || work(&receiver))?;
        }
        Ok(HookPool {
            sender,
            config,
            shares: Mutex::new(HashMap::new()),
        })
    }

    /// How it is sized.
    pub fn config(&self) -> &HookPoolConfig {
        &self.config
    }

    /// Runs `step`, a step of `template`, on a pool thread and waits for its result without
    /// holding the caller's thread, once the template has fewer than its share of steps in
    /// the pool. Refused unrun when its wait (for the share, then for a thread) passes the
    /// pool's `max_wait`. The share is released when the step is done, not when the caller
    /// stops waiting: dropping the returned future leaves the step to finish (its result is
    /// dropped) and counted against its template meanwhile.
    pub async fn run<T: Send + 'static>(
        &self,
        template: &Arc<str>,
        step: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, HookPoolBusy> {
        let limit = self.config.max_wait;
        let share = self
            .shares
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .entry(template.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.config.per_template.max(1))))
            .clone();
        let waited = Instant::now();
        let share = match tokio::time::timeout(limit, share.acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            // The semaphore is never closed.
            Ok(Err(_)) => return Err(HookPoolBusy::Lost),
            Err(_) => return Err(HookPoolBusy::Waited(limit)),
        };
        let max_wait = limit.saturating_sub(waited.elapsed());
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |queued_for| {
            let _share = share;
            let outcome = if queued_for > max_wait {
                Err(HookPoolBusy::Waited(limit))
            } else {
                // A panic is a bug in the step; it must not take the thread with it. The
                // caller sees the step lost (the engine then reloads the conversation).
                catch_unwind(AssertUnwindSafe(step)).map_err(|_| HookPoolBusy::Lost)
            };
            let _ = done.send(outcome);
        });
        let queued = Queued {
            job,
            queued_at: Instant::now(),
        };
        match self.sender.try_send(queued) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(HookPoolBusy::QueueFull(self.config.queue)),
            Err(TrySendError::Disconnected(_)) => return Err(HookPoolBusy::Lost),
        }
        result.await.unwrap_or(Err(HookPoolBusy::Lost))
    }
}

/// A pool thread: takes steps until the pool is dropped.
fn work(receiver: &Mutex<Receiver<Queued>>) {
    loop {
        // The lock is held only while taking one step; a poisoned one still holds a whole
        // receiver (nothing panics while holding it).
        let next = receiver
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .recv();
        let Ok(Queued { job, queued_at }) = next else {
            return;
        };
        job(queued_at.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(threads: usize, queue: usize, max_wait: Duration) -> Arc<HookPool> {
        Arc::new(
            HookPool::start(HookPoolConfig {
                queue,
                max_wait,
                ..HookPoolConfig::with_threads(threads)
            })
            .expect("threads start"),
        )
    }

    fn key(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    /// Runs a step of `template` that holds its thread until the returned sender is dropped
    /// or sent to; returns once the step runs.
    async fn occupy(
        pool: &Arc<HookPool>,
        template: &str,
    ) -> (
        std::sync::mpsc::Sender<()>,
        tokio::task::JoinHandle<Result<(), HookPoolBusy>>,
    ) {
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let (started, running) = tokio::sync::oneshot::channel();
        let step = tokio::spawn({
            let (pool, template) = (pool.clone(), key(template));
            async move {
                pool.run(&template, move || {
                    let _ = started.send(());
                    let _ = blocked.recv();
                })
                .await
            }
        });
        running.await.expect("the blocking step runs");
        (release, step)
    }

    #[tokio::test]
    async fn a_step_runs_on_a_thread_of_the_pool() {
        let pool = pool(2, 4, Duration::from_secs(5));
        let name = pool
            .run(&key("t"), || {
                std::thread::current().name().map(str::to_owned)
            })
            .await
            .expect("runs");
        assert!(name.is_some_and(|name| name.starts_with("hook-")));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_blocked_pool_leaves_the_callers_thread_free() {
        let pool = pool(1, 4, Duration::from_secs(5));
        let (release, blocking) = occupy(&pool, "t").await;
        // On a single-threaded runtime this task runs only if the step does not hold it.
        let other = tokio::spawn(async { 42 }).await.expect("runs");
        assert_eq!(other, 42);
        drop(release);
        assert_eq!(blocking.await.expect("joins"), Ok(()));
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once() {
        let pool = pool(1, 1, Duration::from_secs(5));
        let (release, blocking) = occupy(&pool, "a").await;
        // The one thread is busy; fill the one place in the queue.
        let (filler_ran, filler_done) = std::sync::mpsc::channel();
        let filler = Queued {
            job: Box::new(move |_| {
                let _ = filler_ran.send(());
            }),
            queued_at: Instant::now(),
        };
        assert!(pool.sender.try_send(filler).is_ok());
        assert_eq!(
            pool.run(&key("b"), || ()).await,
            Err(HookPoolBusy::QueueFull(1))
        );
        drop(release);
        assert_eq!(blocking.await.expect("joins"), Ok(()));
        // The thread has taken the filler off the queue once it runs it.
        filler_done
            .recv_timeout(Duration::from_secs(5))
            .expect("the filler ran");
        assert_eq!(
            pool.run(&key("b"), || 1).await,
            Ok(1),
            "the pool serves again"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_step_that_waited_too_long_is_refused_unrun() {
        let max_wait = Duration::from_millis(20);
        let pool = pool(1, 4, max_wait);
        let (release, blocking) = occupy(&pool, "a").await;
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let late = tokio::spawn({
            let (pool, ran) = (pool.clone(), ran.clone());
            async move {
                pool.run(&key("b"), move || {
                    ran.store(true, std::sync::atomic::Ordering::SeqCst)
                })
                .await
            }
        });
        // The late step is queued when this task first sleeps; the thread takes it only
        // after the release, more than `max_wait` later.
        tokio::time::sleep(3 * max_wait).await;
        drop(release);
        assert_eq!(
            late.await.expect("joins"),
            Err(HookPoolBusy::Waited(max_wait))
        );
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(blocking.await.expect("joins"), Ok(()));
    }

    #[tokio::test]
    async fn a_panicking_step_is_lost_and_the_thread_lives_on() {
        let pool = pool(1, 4, Duration::from_secs(5));
        let lost = pool
            .run(&key("t"), || -> u8 { panic!("a bug in a step") })
            .await;
        assert_eq!(lost, Err(HookPoolBusy::Lost));
        assert_eq!(pool.run(&key("t"), || 7).await, Ok(7));
    }

    /// Runs steps of `template` until one is not refused for its share (at most 20 tries).
    async fn share_back(pool: &HookPool, template: &str) -> Result<u8, HookPoolBusy> {
        let mut back = pool.run(&key(template), || 6).await;
        for _ in 0..20 {
            if back.is_ok() {
                break;
            }
            back = pool.run(&key(template), || 6).await;
        }
        back
    }

    #[tokio::test]
    async fn a_template_past_its_share_waits_and_leaves_the_rest_to_others() {
        let max_wait = Duration::from_millis(500);
        let pool = pool(2, 4, max_wait);
        assert_eq!(pool.config().per_template, 1);
        let (release, blocking) = occupy(&pool, "hostile").await;
        // The hostile template has its one share: its next step waits, then is refused.
        assert_eq!(
            pool.run(&key("hostile"), || ()).await,
            Err(HookPoolBusy::Waited(max_wait))
        );
        // Another template still gets the other thread at once.
        assert_eq!(pool.run(&key("other"), || 5).await, Ok(5));
        drop(release);
        assert_eq!(blocking.await.expect("joins"), Ok(()));
        assert_eq!(
            share_back(&pool, "hostile").await,
            Ok(6),
            "its share is back"
        );
    }

    #[tokio::test]
    async fn a_caller_that_went_away_keeps_its_share_until_its_step_is_done() {
        let max_wait = Duration::from_millis(300);
        let pool = pool(2, 4, max_wait);
        let (release, caller) = occupy(&pool, "hostile").await;
        // The caller goes away (a client that sends and disconnects); its step still runs,
        // so the template's one share stays taken.
        caller.abort();
        let _ = caller.await;
        assert_eq!(
            pool.run(&key("hostile"), || ()).await,
            Err(HookPoolBusy::Waited(max_wait))
        );
        drop(release);
        assert_eq!(
            share_back(&pool, "hostile").await,
            Ok(6),
            "the share is back once the step is done"
        );
    }
}
