//! Allocator settings for the long-running servers (`colloquy serve`, the benchmarks'
//! servers), which use mimalloc as their global allocator.

/// mimalloc's `mi_option_purge_delay` (its position in `mi_option_e`, the same in mimalloc
/// 2 and 3; `libmimalloc-sys` names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays with the process before mimalloc returns it to the OS: ten
/// seconds, jemalloc's default decay.
///
/// mimalloc's own default, 10 ms, suits a program that allocates in one burst. A server
/// frees memory in steady batches (the scheduler removes completed conversations every
/// pass) and in lulls between bursts of requests, and with 10 ms it hands those pages back
/// and faults them in again, zeroed by the kernel, when the load returns. Measured with
/// `http-bench`, whose servers take turns (each idles for seconds between its slices): at
/// 10 ms (and at 1 s), `colloquy serve` took about 3 800 page faults a second under load
/// and 17–19 µs of CPU per request; with pages kept, none, and 15.6 µs. Ten seconds
/// rides out such lulls and still gives memory back after a spike.
pub const PURGE_DELAY_MS: i64 = 10_000;

/// Applies the settings. Call it first thing in `main`; it only changes how soon freed
/// memory is returned, so calling it later (or not at all) is harmless.
pub fn tune_for_server() {
    #[allow(unsafe_code)]
    // SAFETY: `mi_option_set` only stores an option value; mimalloc reads it atomically and
    // accepts any value for the purge delay (-1 disables purging).
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as _);
    }
}
