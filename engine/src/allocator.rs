//! Allocator settings for the long-running servers (`colloquy serve`, the benchmarks'
//! servers), which use mimalloc as their global allocator.

/// mimalloc's `mi_option_purge_delay` (its position in `mi_option_e`, the same in mimalloc
/// 2 and 3; `libmimalloc-sys` names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays with the process before mimalloc returns it to the OS.
/// mimalloc's default, 10 ms, is shorter than the gap between bursts of requests, so a busy
/// server hands pages back and faults them in again (zeroed by the kernel) over and over:
/// about a tenth of the server's time in the HTTP benchmark. A second still gives memory
/// back soon after a spike.
pub const PURGE_DELAY_MS: i64 = 1_000;

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
