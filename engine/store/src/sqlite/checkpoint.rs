//! Checkpoints of the WAL, mostly off the writer thread.
//!
//! A checkpoint copies the pages the WAL holds into the database file and syncs it; once
//! every frame is copied, the next write transaction starts the WAL again from its
//! beginning. SQLite's automatic checkpoint runs inside the commit that crosses its
//! threshold, on the committing connection: on our writer thread, where copying 64 MiB and
//! syncing the database held up every commit queued behind it, a few times a second under
//! load (in the stores benchmark, the longest a message took was 43 to 180 ms with it and
//! mostly 16 to 34 ms with this).
//!
//! Instead, the writer's connection has no automatic checkpoint; a WAL hook tells it the
//! WAL's size after each commit, and:
//! - from [`Limits::background`] frames on, a *checkpointer* thread with its own connection
//!   runs passive checkpoints, which copy frames while the writer goes on appending, and
//!   syncs the database file after each;
//! - the WAL restarts only when a write transaction begins with every frame copied, which a
//!   concurrent checkpoint under steady writes rarely leaves. So when a background pass has
//!   left at most [`Limits::finish`] frames (or after [`Limits::passes`] passes), the writer
//!   copies the rest itself, between two batches: a pause of a millisecond or two instead of
//!   tens, after which the WAL starts again;
//! - from [`Limits::force`] frames on (the checkpointer cannot keep up), the writer
//!   checkpoints whatever is left itself, as SQLite would have, so the WAL stays bounded.
//!   A background pass still running then holds SQLite's checkpoint lock (its sync may wait
//!   long on a busy disk), so the writer first waits for it to end: commits stop for that
//!   while, rather than the WAL growing by every commit that comes meanwhile.
//!
//! Passive checkpoints never wait for readers or writers; a reader that still needs old
//! frames just leaves them for a later pass. Both connections run `synchronous = NORMAL`,
//! so a checkpoint syncs the WAL before copying and the database before it records the
//! frames as copied: an acknowledged commit is never only in a frame the WAL may overwrite.

use std::cell::Cell;
use std::fs::File;
use std::os::raw::c_int;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::thread;
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::hooks::Wal;

/// When checkpoints happen, in WAL frames (one per page written, 4 KiB each).
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// WAL size from which the checkpointer copies frames in the background.
    pub background: u64,
    /// Frames a background pass may leave for the writer to finish.
    pub finish: u64,
    /// Background passes per WAL after which the writer finishes whatever they left: when
    /// the writer appends more than `finish` frames during every pass, they never get there.
    pub passes: u32,
    /// WAL size from which the writer checkpoints itself, whatever is left, after waiting
    /// for a background pass under way.
    pub force: u64,
}

/// The longest the writer waits for a background pass to end before it checkpoints past the
/// force size. Far longer than any sync should take; it only keeps a checkpointer that is
/// stuck for good from stopping every commit.
const LONGEST_WAIT_FOR_A_PASS: Duration = Duration::from_secs(10);

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            // 64 MiB: as many commits between checkpoints as SQLite's automatic checkpoint
            // had here, so a page rewritten many times is copied once.
            background: 16_384,
            // 2 MiB: a millisecond or two of copying and syncing.
            finish: 512,
            passes: 3,
            // 256 MiB.
            force: 65_536,
        }
    }
}

thread_local! {
    /// The WAL size (in frames) the writer's last commit left, set by [`record_wal_size`]
    /// on the writer thread, which is the only thread that commits on its connection.
    static WAL_FRAMES: Cell<u64> = const { Cell::new(0) };
}

/// The WAL hook of the writer's connection. Registering it also turns SQLite's automatic
/// checkpoint off (both are the connection's one WAL hook).
fn record_wal_size(_wal: &Wal, frames: c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.with(|size| size.set(u64::try_from(frames).unwrap_or(0)));
    Ok(())
}

/// What the writer knows of the checkpointer, and the signal that a pass ended.
#[derive(Debug, Default)]
struct Checkpoints {
    state: Mutex<Shared>,
    pass_ended: Condvar,
}

impl Checkpoints {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        // Two plain fields, each written whole: a panic cannot leave them inconsistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits (at most `longest`) until no background pass is under way.
    fn wait_for_pass<'a>(
        &'a self,
        state: MutexGuard<'a, Shared>,
        longest: Duration,
    ) -> MutexGuard<'a, Shared> {
        let (state, waited) = self
            .pass_ended
            .wait_timeout_while(state, longest, |state| state.running)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if waited.timed_out() {
            tracing::warn!(
                "a SQLite WAL checkpoint pass has run for {longest:?}; the writer checkpoints without waiting for it"
            );
        }
        state
    }

    /// Records the end of a background pass and wakes a writer waiting for it.
    fn end_pass(&self, copied: Option<(u64, u64)>) {
        let mut state = self.lock();
        state.running = false;
        if copied.is_some() {
            state.last = copied;
        }
        drop(state);
        self.pass_ended.notify_all();
    }
}

/// What the writer knows of the checkpointer.
#[derive(Debug, Default)]
struct Shared {
    /// A background pass is under way.
    running: bool,
    /// The last background pass: the WAL generation it ran in and how many frames of it were
    /// copied when it ended.
    last: Option<(u64, u64)>,
}

/// What the writer does about the WAL after a commit.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Nothing,
    /// Ask the checkpointer for a pass over this WAL generation.
    Background(u64),
    /// Copy what is left on the writer's own connection.
    Finish,
    /// Past the force size: wait for a background pass under way to end, then copy what is
    /// left on the writer's own connection.
    Force,
}

/// The writer's bookkeeping, apart from any database so its decisions can be tested alone.
#[derive(Debug)]
struct Plan {
    limits: Limits,
    /// Counts WAL restarts (seen as the WAL getting smaller), so a pass of an earlier WAL
    /// is not taken for one of this WAL.
    generation: u64,
    /// The WAL size after the previous commit.
    frames: u64,
    /// Background passes asked for in this WAL generation.
    passes: u32,
}

impl Plan {
    fn new(limits: Limits) -> Plan {
        Plan {
            limits,
            generation: 0,
            frames: 0,
            passes: 0,
        }
    }

    /// The step after a commit that left `frames` in the WAL.
    fn step(&mut self, frames: u64, checkpointer: &Shared) -> Step {
        if frames < self.frames {
            self.generation += 1;
            self.passes = 0;
        }
        self.frames = frames;
        // Past the force size the writer checkpoints even while a background pass runs: a
        // pass can take long (its sync waits for a slow or busy disk), and the WAL must not
        // grow without bound meanwhile.
        if frames >= self.limits.force {
            return Step::Force;
        }
        if frames < self.limits.background || checkpointer.running {
            return Step::Nothing;
        }
        let copied = match checkpointer.last {
            Some((generation, copied)) if generation == self.generation => copied,
            _ => 0,
        };
        if frames.saturating_sub(copied) <= self.limits.finish || self.passes >= self.limits.passes
        {
            return Step::Finish;
        }
        // Counted even if the checkpointer cannot be woken: then the writer finishes after
        // `passes` tries, as it would after that many passes.
        self.passes += 1;
        Step::Background(self.generation)
    }
}

/// The writer's side: decides after each commit whether a checkpoint is due and where.
pub(super) struct Checkpointer {
    plan: Plan,
    shared: Arc<Checkpoints>,
    /// Wakes the checkpointer with the WAL generation to checkpoint; `None` once stopping.
    wake: Option<mpsc::Sender<u64>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Checkpointer {
    /// Turns off SQLite's automatic checkpoint on `writer` and starts the checkpointer
    /// thread on `own` (a second connection to the same database).
    pub fn start(
        writer: &Connection,
        own: Connection,
        database: &Path,
        limits: Limits,
    ) -> std::io::Result<Checkpointer> {
        let database = File::options().write(true).open(database)?;
        writer.wal_hook(Some(record_wal_size));
        let shared = Arc::new(Checkpoints::default());
        let (wake, passes) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("colloquy-sqlite-checkpointer".to_owned())
            .spawn({
                let shared = shared.clone();
                move || run(&own, &database, &passes, &shared)
            })?;
        Ok(Checkpointer {
            plan: Plan::new(limits),
            shared,
            wake: Some(wake),
            thread: Some(thread),
        })
    }

    /// Called by the writer after each committed transaction (after answering it, as the
    /// writer may checkpoint here).
    pub fn after_commit(&mut self, writer: &Connection) {
        let frames = WAL_FRAMES.with(Cell::get);
        let mut shared = self.shared.lock();
        match self.plan.step(frames, &shared) {
            Step::Nothing => {}
            Step::Background(generation) => {
                if let Some(wake) = &self.wake
                    && wake.send(generation).is_ok()
                {
                    shared.running = true;
                }
            }
            Step::Finish => {
                drop(shared);
                finish(writer);
            }
            Step::Force => {
                // The pass holds SQLite's checkpoint lock: a checkpoint now would copy
                // nothing.
                drop(self.shared.wait_for_pass(shared, LONGEST_WAIT_FOR_A_PASS));
                finish(writer);
            }
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.wake = None;
        if let Some(thread) = self.thread.take() {
            // A panicked checkpointer has nothing left to clean up.
            let _ = thread.join();
        }
    }
}

/// The writer copies what is left of the WAL.
fn finish(writer: &Connection) {
    if let Err(error) = passive_checkpoint(writer) {
        tracing::warn!(%error, "SQLite WAL checkpoint failed; will try again");
    }
}

/// The checkpointer thread: one passive checkpoint per wake-up, then a sync of the
/// database file. A pass that ends before the WAL does (the writer appended meanwhile)
/// leaves the pages it copied unsynced, for the checkpoint that copies the last frame to
/// sync before the WAL can restart: that is the writer's, and syncing tens of megabytes
/// there took it 10 to 20 ms. Synced here, the writer's sync finds only its own few pages.
fn run(
    connection: &Connection,
    database: &File,
    passes: &mpsc::Receiver<u64>,
    shared: &Checkpoints,
) {
    while let Ok(generation) = passes.recv() {
        let outcome = passive_checkpoint(connection)
            .map_err(|error| format!("checkpoint failed: {error}"))
            .and_then(|copied| {
                database
                    .sync_data()
                    .map(|()| copied)
                    .map_err(|error| format!("cannot sync the database file: {error}"))
            });
        match outcome {
            Ok(copied) => shared.end_pass(Some((generation, copied))),
            Err(error) => {
                tracing::warn!(%error, "SQLite WAL checkpoint pass failed; will try again");
                shared.end_pass(None);
            }
        }
    }
}

/// Copies what it can of the WAL into the database without waiting for anyone; returns how
/// many frames of the WAL are copied now.
fn passive_checkpoint(connection: &Connection) -> rusqlite::Result<u64> {
    connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        let copied: i64 = row.get(2)?;
        Ok(u64::try_from(copied).unwrap_or(0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        background: 100,
        finish: 10,
        passes: 3,
        force: 1_000,
    };

    fn idle(last: Option<(u64, u64)>) -> Shared {
        Shared {
            running: false,
            last,
        }
    }

    #[test]
    fn a_small_wal_is_left_alone() {
        let mut plan = Plan::new(LIMITS);
        assert_eq!(plan.step(99, &idle(None)), Step::Nothing);
    }

    #[test]
    fn the_checkpointer_copies_the_bulk_and_the_writer_the_rest() {
        let mut plan = Plan::new(LIMITS);
        assert_eq!(plan.step(100, &idle(None)), Step::Background(0));
        let running = Shared {
            running: true,
            last: None,
        };
        assert_eq!(plan.step(130, &running), Step::Nothing);
        // The pass copied 100 frames; 40 more came meanwhile: another pass.
        assert_eq!(plan.step(140, &idle(Some((0, 100)))), Step::Background(0));
        // That one left 5: the writer finishes.
        assert_eq!(plan.step(150, &idle(Some((0, 145)))), Step::Finish);
        // The WAL started again: a new generation, and a small WAL.
        assert_eq!(plan.step(4, &idle(Some((0, 145)))), Step::Nothing);
    }

    #[test]
    fn passes_that_never_catch_up_end_with_the_writer_finishing() {
        let mut plan = Plan::new(LIMITS);
        let mut frames = 100;
        for _ in 0..LIMITS.passes {
            assert_eq!(
                plan.step(frames, &idle(Some((0, frames - 50)))),
                Step::Background(0)
            );
            frames += 50;
        }
        assert_eq!(
            plan.step(frames, &idle(Some((0, frames - 50)))),
            Step::Finish
        );
    }

    #[test]
    fn past_the_force_size_the_writer_checkpoints() {
        let mut plan = Plan::new(LIMITS);
        assert_eq!(plan.step(1_000, &idle(None)), Step::Force);
    }

    #[test]
    fn past_the_force_size_the_writer_checkpoints_even_while_a_pass_runs() {
        let mut plan = Plan::new(LIMITS);
        assert_eq!(plan.step(100, &idle(None)), Step::Background(0));
        let running = Shared {
            running: true,
            last: None,
        };
        assert_eq!(plan.step(999, &running), Step::Nothing);
        assert_eq!(plan.step(1_000, &running), Step::Force);
        assert_eq!(plan.step(1_200, &running), Step::Force);
    }

    #[test]
    fn a_writer_forced_to_checkpoint_waits_for_the_pass_under_way() {
        let checkpoints = Arc::new(Checkpoints::default());
        checkpoints.lock().running = true;
        let checkpointer = thread::spawn({
            let checkpoints = checkpoints.clone();
            move || {
                thread::sleep(Duration::from_millis(20));
                checkpoints.end_pass(Some((0, 900)));
            }
        });
        // Bounded far above the pass, so the test fails rather than hangs.
        let state = checkpoints.wait_for_pass(checkpoints.lock(), Duration::from_secs(60));
        assert!(!state.running);
        assert_eq!(state.last, Some((0, 900)));
        drop(state);
        checkpointer.join().expect("the pass");
    }

    #[test]
    fn a_pass_that_never_ends_holds_the_writer_only_so_long() {
        let checkpoints = Checkpoints::default();
        checkpoints.lock().running = true;
        let state = checkpoints.wait_for_pass(checkpoints.lock(), Duration::from_millis(10));
        assert!(state.running);
    }

    #[test]
    fn a_pass_over_an_earlier_wal_does_not_count() {
        let mut plan = Plan::new(LIMITS);
        assert_eq!(plan.step(500, &idle(None)), Step::Background(0));
        // The WAL restarted (it got smaller) and grew again past the background size.
        assert_eq!(plan.step(50, &idle(None)), Step::Nothing);
        // The pass that ended copied 495 frames, but of the earlier WAL: not these.
        assert_eq!(plan.step(500, &idle(Some((0, 495)))), Step::Background(1));
        assert_eq!(plan.step(510, &idle(Some((1, 505)))), Step::Finish);
    }
}
