//! A hook call's time budget, counted in the CPU time of the thread that runs the call.
//!
//! The budget is there to stop a hook that runs away (an endless loop, a runaway
//! computation). Wall time is the wrong measure for that: on a loaded machine the OS can
//! take a thread away for longer than a whole 10 ms budget, and a wall-clock budget then
//! stops a hook that did nothing wrong (CI on a busy two-core machine saw the credit
//! assessment's `on_start`, a few microseconds of work, stopped "after its 10 ms budget").
//!
//! Reading a thread's CPU clock is a system call, about 0.8 µs on our machines: as much as a
//! whole trivial hook call. So a call does not read it when it starts. Each thread keeps a
//! [`CpuMark`], its CPU clock read at some instant, renewed by the first call that finds it
//! older than [`MARK_MAX_AGE`]. The ticker looks at a call only once the wall time of its
//! budget has passed (most calls end long before); only then is the CPU clock read. The CPU
//! time the call has spent is at least what the thread spent since the mark, less the wall
//! time from the mark to the call's start (the thread cannot have spent more CPU time than
//! that in between). The call is stopped once that lower bound reaches the budget: a call is
//! never stopped before it has spent its budget, and a runaway one at most
//! [`MARK_MAX_AGE`] of CPU time after.
//!
//! CPU time alone would let a call whose thread gets little of a core run for ever in wall
//! time: on a two-core machine with more hooks running to their budgets than cores, each got
//! a share and none ended within a minute (issue 32). So a call is also stopped once its
//! budget and [`WALL_MARGIN`] have passed in wall time, whatever CPU time it got.
//!
//! CPU time still counts whatever the thread does during the call, the host's work too:
//! the time the host spends reading the answer before the post-return call is left out
//! ([`CallBudget::exclude`]), since on a VM where touching fresh memory stalls the thread
//! for milliseconds, the allocations of that reading once took a whole budget.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How old a thread's CPU mark may be when a call starts from it: the most a runaway call
/// may run past its budget (in CPU time, before the ticker's own slack).
pub const MARK_MAX_AGE: Duration = Duration::from_millis(1);

/// How long past its budget, in wall time, a call may run when the OS kept its thread from a
/// core (or waiting on a page fault) for part of it. Generous, since a call stopped here did
/// nothing wrong but wait: with 250 ms, the credit policy's first call (a few microseconds of
/// work, its code paged in from the AOT cache) was stopped once on a machine loaded with
/// builds and disk writes. Small enough that a call's caller has its answer soon after the
/// budget, however many hooks run at once.
pub const WALL_MARGIN: Duration = Duration::from_secs(1);

/// A thread's CPU clock, read at an instant.
#[derive(Clone, Copy, Debug)]
struct CpuMark {
    at: Instant,
    cpu: Duration,
}

thread_local! {
    static MARK: Cell<Option<CpuMark>> = const { Cell::new(None) };
}

/// The budget of the call a store runs now.
#[derive(Clone, Copy, Debug)]
pub struct CallBudget {
    budget: Duration,
    started: Instant,
    /// When the budget would end if the thread ran nothing but the call: the ticker need not
    /// look at the call before.
    ends_at: Instant,
    /// When the call is stopped whatever CPU time it had: [`WALL_MARGIN`] after `ends_at`.
    wall_limit: Instant,
    mark: CpuMark,
}

/// What a look at a running call finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The call has spent its budget: stop it.
    Spent,
    /// It has not; its budget cannot end before this instant.
    NotBefore(Instant),
}

impl CallBudget {
    /// Starts a budget for a call about to run on this thread.
    pub fn start(budget: Duration) -> CallBudget {
        CallBudget::start_at(budget, Instant::now())
    }

    /// Starts a budget for a call about to run on this thread, from `started`, an instant
    /// the caller has just read (a clock read less per call).
    pub fn start_at(budget: Duration, started: Instant) -> CallBudget {
        CallBudget::start_with_margin(budget, started, WALL_MARGIN)
    }

    /// [`CallBudget::start_at`] with `wall_margin` instead of [`WALL_MARGIN`]: a call tried
    /// on an async worker gets none, since the worker is what it must not hold.
    pub fn start_with_margin(
        budget: Duration,
        started: Instant,
        wall_margin: Duration,
    ) -> CallBudget {
        let mark = MARK.with(|cell| match cell.get() {
            Some(mark) if started.saturating_duration_since(mark.at) <= MARK_MAX_AGE => mark,
            _ => {
                let mark = CpuMark {
                    at: started,
                    cpu: thread_cpu_time(),
                };
                cell.set(Some(mark));
                mark
            }
        });
        CallBudget::from_mark(budget, started, mark, wall_margin)
    }

    fn from_mark(
        budget: Duration,
        started: Instant,
        mark: CpuMark,
        wall_margin: Duration,
    ) -> CallBudget {
        // A budget past what the clock can hold (compiled templates cap it far below) never
        // ends.
        let ends_at = started
            .checked_add(budget)
            .unwrap_or_else(|| started + Duration::from_secs(u64::from(u32::MAX)));
        let wall_limit = ends_at.checked_add(wall_margin).unwrap_or(ends_at);
        CallBudget {
            budget,
            started,
            ends_at,
            wall_limit,
            mark,
        }
    }

    /// Leaves out of the call's budget `host`, time the host spent on the calling thread
    /// between two wasm executions of the call (the CPU time it took is at most that): the
    /// budget counts the hook's time, not the host's.
    pub fn exclude(&mut self, host: Duration) {
        self.started = self.started.checked_add(host).unwrap_or(self.started);
        self.ends_at = self.ends_at.checked_add(host).unwrap_or(self.ends_at);
        self.wall_limit = self.wall_limit.checked_add(host).unwrap_or(self.wall_limit);
    }

    /// Looks at the call at `now`, from the thread that runs it (a store's epoch callback
    /// runs there).
    pub fn check(&self, now: Instant) -> Verdict {
        if now < self.ends_at {
            return Verdict::NotBefore(self.ends_at);
        }
        self.check_cpu(now, thread_cpu_time())
    }

    /// [`Self::check`] past the wall end, with the thread's CPU clock read at `now`.
    fn check_cpu(&self, now: Instant, cpu_now: Duration) -> Verdict {
        if now >= self.wall_limit {
            return Verdict::Spent;
        }
        match self.budget.checked_sub(self.spent_at_least(cpu_now)) {
            Some(left) if !left.is_zero() => Verdict::NotBefore((now + left).min(self.wall_limit)),
            _ => Verdict::Spent,
        }
    }
}

impl CallBudget {
    /// The least CPU time the call can have spent, given the thread's CPU clock now.
    fn spent_at_least(&self, cpu_now: Duration) -> Duration {
        cpu_now
            .saturating_sub(self.mark.cpu)
            .saturating_sub(self.started.saturating_duration_since(self.mark.at))
    }

    /// Whether the call, stopped at its limit, had less than half its budget in CPU time:
    /// the OS kept its thread from a core (a busy machine), the hook did not run long. Asked
    /// on the thread that ran the call, right after it was stopped.
    pub fn starved(&self) -> bool {
        self.starved_at(thread_cpu_time())
    }

    fn starved_at(&self, cpu_now: Duration) -> bool {
        self.spent_at_least(cpu_now) < self.budget / 2
    }
}

/// The CPU time this thread has spent.
#[cfg(unix)]
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through the valid pointer it is given.
    #[allow(unsafe_code)]
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if status != 0 {
        // Not expected on any unix we run on; counting nothing would let a runaway call go
        // on for ever, so count wall time instead.
        return wall_clock();
    }
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// Without a thread CPU clock, the budget counts wall time.
#[cfg(not(unix))]
fn thread_cpu_time() -> Duration {
    wall_clock()
}

/// Wall time on a monotonic clock, as a stand-in CPU clock: with it, a budget counts wall
/// time (the thread is taken to run all the time).
fn wall_clock() -> Duration {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn budget_of_10ms(mark_age: Duration, mark_cpu: Duration) -> (CallBudget, Instant) {
        let started = Instant::now();
        let mark = CpuMark {
            at: started - mark_age,
            cpu: mark_cpu,
        };
        (
            CallBudget::from_mark(10 * MS, started, mark, WALL_MARGIN),
            started,
        )
    }

    #[test]
    fn before_its_wall_end_a_call_is_not_looked_at() {
        let (budget, started) = budget_of_10ms(Duration::ZERO, Duration::ZERO);
        assert_eq!(
            budget.check(started + 3 * MS),
            Verdict::NotBefore(started + 10 * MS)
        );
    }

    #[test]
    fn a_call_kept_waiting_by_the_os_goes_on_for_the_cpu_time_it_has_left() {
        let (budget, started) = budget_of_10ms(Duration::ZERO, 50 * MS);
        // 25 ms of wall time later the thread has run the call for 2 ms only.
        let now = started + 25 * MS;
        assert_eq!(
            budget.check_cpu(now, 52 * MS),
            Verdict::NotBefore(now + 8 * MS)
        );
    }

    #[test]
    fn a_call_kept_waiting_past_the_wall_margin_is_stopped_whatever_cpu_it_had() {
        let (budget, started) = budget_of_10ms(Duration::ZERO, 50 * MS);
        // Starved: 1 ms of CPU in all just before the wall limit; the 9 ms it has left would
        // run past that limit, so its next look is due at the limit.
        let limit = started + 10 * MS + WALL_MARGIN;
        let now = limit - 5 * MS;
        assert_eq!(budget.check_cpu(now, 51 * MS), Verdict::NotBefore(limit));
        assert_eq!(budget.check(limit), Verdict::Spent);
        assert_eq!(budget.check_cpu(limit, 52 * MS), Verdict::Spent);
    }

    #[test]
    fn a_call_that_spent_its_budget_is_stopped() {
        let (budget, started) = budget_of_10ms(Duration::ZERO, 50 * MS);
        assert_eq!(budget.check_cpu(started + 11 * MS, 60 * MS), Verdict::Spent);
        assert_eq!(budget.check_cpu(started + 30 * MS, 75 * MS), Verdict::Spent);
    }

    #[test]
    fn cpu_time_before_the_call_from_an_older_mark_is_never_counted_against_it() {
        // The mark is 1 ms older than the call; the thread may have run all of that ms.
        let (budget, started) = budget_of_10ms(MS, 50 * MS);
        // 10.5 ms of CPU since the mark: the call itself spent at least 9.5 ms.
        let now = started + 10 * MS;
        assert_eq!(
            budget.check_cpu(now, 60 * MS + MS / 2),
            Verdict::NotBefore(now + MS / 2)
        );
        assert_eq!(budget.check_cpu(now, 61 * MS), Verdict::Spent);
    }

    #[test]
    fn time_the_host_spent_between_wasm_executions_is_left_out() {
        let (mut budget, started) = budget_of_10ms(Duration::ZERO, 50 * MS);
        // The host spent 6 ms (of wall time, so at most that of CPU) reading the answer.
        budget.exclude(6 * MS);
        let now = started + 11 * MS;
        assert_eq!(budget.check(now), Verdict::NotBefore(started + 16 * MS));
        // 11 ms of CPU since the call began: the hook's own share is at least 5 ms.
        assert_eq!(
            budget.check_cpu(now, 61 * MS),
            Verdict::NotBefore(now + 5 * MS)
        );
        assert_eq!(budget.check_cpu(started + 16 * MS, 66 * MS), Verdict::Spent);
    }

    #[test]
    fn a_call_stopped_with_less_than_half_its_budget_of_cpu_time_was_starved() {
        let (budget, _) = budget_of_10ms(Duration::ZERO, 50 * MS);
        assert!(budget.starved_at(54 * MS));
        assert!(!budget.starved_at(55 * MS));
        assert!(!budget.starved_at(60 * MS));
        // From a mark 1 ms older than the call, that ms may have been the thread's.
        let (budget, _) = budget_of_10ms(MS, 50 * MS);
        assert!(budget.starved_at(55 * MS));
        assert!(!budget.starved_at(56 * MS));
    }

    #[test]
    fn a_thread_reuses_its_mark_while_it_is_fresh() {
        let first = CallBudget::start(10 * MS);
        let second = CallBudget::start(10 * MS);
        if second.started.duration_since(first.mark.at) <= MARK_MAX_AGE {
            assert_eq!(second.mark.at, first.mark.at);
        }
        std::thread::sleep(2 * MARK_MAX_AGE);
        let later = CallBudget::start(10 * MS);
        assert!(later.mark.at > first.mark.at, "a stale mark is renewed");
        assert!(later.mark.cpu >= first.mark.cpu);
    }

    #[test]
    fn the_thread_cpu_clock_counts_work_and_not_sleep() {
        let before = thread_cpu_time();
        std::thread::sleep(20 * MS);
        let slept = thread_cpu_time() - before;
        let started = Instant::now();
        let mut spin = 0u64;
        while started.elapsed() < 20 * MS {
            spin = std::hint::black_box(spin.wrapping_add(1));
        }
        let worked = thread_cpu_time() - before - slept;
        assert!(worked > slept, "slept {slept:?}, worked {worked:?}");
    }
}
