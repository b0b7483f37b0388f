//! Allocator settings for `colloquy serve`, whose global allocator is mimalloc.

/// mimalloc's `mi_option_purge_delay` (its position in `mi_option_e`, the same in mimalloc 2
/// and 3; `libmimalloc-sys` names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The environment variable through which mimalloc takes the purge delay; when it is set,
/// its value is kept.
pub const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// How long memory the engine freed stays with the process before mimalloc returns it to the
/// OS: five minutes, the default retention of completed conversations.
///
/// mimalloc's own default, 10 ms, suits a program that allocates in bursts. The engine frees
/// memory in batches (each scheduler pass removes the conversations whose retention ended)
/// and reuses it for the conversations that start meanwhile; returning it after 10 ms meant
/// a madvise call per freed page range (some took 2–4 ms on the one worker thread) and a
/// zeroed page fault when it was used again. In `http-bench`, four interleaved pairs without
/// and with purging off gave a colloquy/echo rate of 0.56–0.60 and 0.60–0.63. After a spike,
/// the memory still goes back, five minutes later. `MIMALLOC_PURGE_DELAY` (milliseconds; -1:
/// never) overrides it.
pub const PURGE_DELAY_MS: i64 = 5 * 60 * 1000;

/// Applies the settings, unless the environment chose otherwise. Call it first thing in
/// `main`: it only changes when freed memory is returned, so later (or never) is harmless.
pub fn tune_for_server() {
    if std::env::var_os(PURGE_DELAY_ENV).is_some() {
        return;
    }
    #[allow(unsafe_code)]
    // SAFETY: `mi_option_set` only stores an option's value, which mimalloc reads
    // atomically; any value is valid for the purge delay.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as _);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_is_set_unless_the_environment_sets_it() {
        tune_for_server();
        #[allow(unsafe_code)]
        // SAFETY: reads an option's value.
        let delay = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        // `c_long` is `i64` on the 64-bit Linux this runs on.
        let delay = delay as i64;
        match std::env::var(PURGE_DELAY_ENV) {
            Ok(chosen) => assert_eq!(Some(delay), chosen.trim().parse().ok()),
            Err(_) => assert_eq!(delay, PURGE_DELAY_MS),
        }
    }
}
