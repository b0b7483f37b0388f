//! The host functions of `colloquy:hooks/host@1.0.0`, as safe calls. Off wasm they are
//! mocked (see [`mock`]) so hooks can be unit-tested with `cargo test`.

use crate::action::LogLevel;

/// Writes a line to the engine log, tagged with the conversation id.
pub fn log(level: LogLevel, line: &str) {
    imp::log(level_code(level), line);
}

/// The host's wall clock (Unix milliseconds). Prefer the event's `now` for decisions: it is
/// the engine clock the conversation's deadlines use.
pub fn now_ms() -> u64 {
    imp::now_ms()
}

fn level_code(level: LogLevel) -> u32 {
    match level {
        LogLevel::Debug => 0,
        LogLevel::Info => 1,
        LogLevel::Warn => 2,
        LogLevel::Error => 3,
    }
}

#[cfg(target_arch = "wasm32")]
mod imp {
    #[link(wasm_import_module = "colloquy:hooks/host@1.0.0")]
    extern "C" {
        #[link_name = "log"]
        fn host_log(level: u32, ptr: *const u8, len: usize);
        #[link_name = "now-ms"]
        fn host_now_ms() -> u64;
    }

    pub fn log(level: u32, line: &str) {
        // SAFETY: the pointer and length describe `line`, alive for the call; the host only
        // reads them.
        unsafe { host_log(level, line.as_ptr(), line.len()) }
    }

    pub fn now_ms() -> u64 {
        // SAFETY: takes no arguments and only returns a number.
        unsafe { host_now_ms() }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use std::cell::{Cell, RefCell};

    thread_local! {
        pub static LOGS: RefCell<Vec<(u32, String)>> = const { RefCell::new(Vec::new()) };
        pub static NOW: Cell<u64> = const { Cell::new(0) };
    }

    pub fn log(level: u32, line: &str) {
        LOGS.with(|logs| logs.borrow_mut().push((level, line.to_owned())));
    }

    pub fn now_ms() -> u64 {
        NOW.with(Cell::get)
    }
}

/// The off-wasm stand-ins for the host (per test thread).
#[cfg(not(target_arch = "wasm32"))]
pub mod mock {
    use crate::action::LogLevel;

    /// The lines logged on this thread so far, emptied.
    pub fn take_logs() -> Vec<(LogLevel, String)> {
        super::imp::LOGS.with(|logs| {
            logs.borrow_mut()
                .drain(..)
                .map(|(level, line)| {
                    let level = match level {
                        0 => LogLevel::Debug,
                        2 => LogLevel::Warn,
                        3 => LogLevel::Error,
                        _ => LogLevel::Info,
                    };
                    (level, line)
                })
                .collect()
        })
    }

    /// What [`super::now_ms`] returns on this thread.
    pub fn set_now_ms(now: u64) {
        super::imp::NOW.with(|cell| cell.set(now));
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[test]
    fn mocked_host_keeps_lines_and_time() {
        log(LogLevel::Warn, "careful");
        mock::set_now_ms(42);
        assert_eq!(now_ms(), 42);
        assert_eq!(
            mock::take_logs(),
            vec![(LogLevel::Warn, "careful".to_owned())]
        );
        assert!(mock::take_logs().is_empty());
    }
}
