//! The canonical-ABI glue behind [`crate::export_hook!`]: the lowering of
//! `func(event: string) -> string`. Hooks do not call this directly.
//!
//! The host allocates the input with `cabi_realloc(0, 0, 1, len)` and writes it; the export
//! takes ownership, runs the hook, and returns a pointer to `[ptr, len]` of the output, which
//! stays alive until the host has copied it and called `cabi_post_<name>`.

use std::alloc::{self, Layout};
use std::cell::RefCell;

use crate::action::Output;
use crate::event::Event;
pub use crate::event::HookKind;
use crate::Hook;

/// Runs `hook` on the event JSON `input` and returns the output JSON: exactly what the
/// exports do, minus the memory handling. Handy in native tests.
///
/// An input that does not parse is answered with a `reject` naming the problem (it would be
/// an engine/SDK version mismatch, which a template author should hear about).
pub fn handle<H: Hook + ?Sized>(hook: &H, kind: HookKind, input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    handle_into(hook, kind, input, &mut out);
    out
}

/// [`handle`], appending the output to `out` (the exports reuse one buffer across calls).
pub fn handle_into<H: Hook + ?Sized>(hook: &H, kind: HookKind, input: &[u8], out: &mut Vec<u8>) {
    let actions = match Event::from_json(input) {
        Ok(event) => match kind {
            HookKind::OnStart => hook.on_start(&event),
            HookKind::OnMessage => hook.on_message(&event),
            HookKind::OnTimeout => hook.on_timeout(&event),
        },
        Err(error) => vec![crate::Action::reject(format!(
            "the hook cannot read its event: {error}"
        ))],
    };
    if actions.is_empty() {
        // "Carry on", the common answer: no serializer needed.
        out.extend_from_slice(b"{}");
        return;
    }
    let output = Output {
        actions,
        log: Vec::new(),
    };
    // Room for a usual answer at once: grown from empty, the buffer was copied four times
    // on its way to a one-action answer (with the call arena it starts empty every call).
    out.reserve(OUTPUT_START_CAPACITY);
    crate::write::output(&output, out);
}

/// What the output buffer holds before the answer is written: a few actions' worth.
const OUTPUT_START_CAPACITY: usize = 256;

/// Output buffers larger than this are freed after the call instead of kept for the next.
const KEEP_OUTPUT_CAPACITY: usize = 64 * 1024;

thread_local! {
    /// The output of the last call and its `[ptr, len]` return area, kept until
    /// `cabi_post_*` (wasm hooks are single-threaded: one per instance). The buffer's
    /// capacity is kept between calls, so a call allocates nothing for its output.
    static RETURN: RefCell<(Vec<u8>, [u32; 2])> = const { RefCell::new((Vec::new(), [0, 0])) };
}

/// `cabi_realloc`: allocates (or grows) a block for the host.
///
/// # Safety
/// `old` must be null with `old_size` 0, or a block this function returned with that size
/// and `align`.
#[allow(unsafe_code)]
pub unsafe fn realloc(old: *mut u8, old_size: usize, align: usize, new_size: usize) -> *mut u8 {
    let align = align.max(1);
    if new_size == 0 {
        return align as *mut u8;
    }
    // No `let ... else`: the SDK builds with Rust 1.63.
    let new_layout = match Layout::from_size_align(new_size, align) {
        Ok(layout) => layout,
        Err(_) => return std::ptr::null_mut(),
    };
    if old.is_null() || old_size == 0 {
        return alloc::alloc(new_layout);
    }
    match Layout::from_size_align(old_size, align) {
        Ok(old_layout) => alloc::realloc(old, old_layout, new_size),
        Err(_) => std::ptr::null_mut(),
    }
}

/// The body of the `start`/`message`/`timeout` exports.
///
/// # Safety
/// `ptr`/`len` must be a block from [`realloc`] with alignment 1 holding the input; this
/// function takes ownership of it.
#[allow(unsafe_code)]
pub unsafe fn call<H: Hook + ?Sized>(
    hook: &H,
    kind: HookKind,
    ptr: *mut u8,
    len: usize,
) -> *const u32 {
    let input = if len == 0 {
        Vec::new()
    } else {
        // The host allocated exactly `len` bytes with alignment 1 and wrote them all.
        Vec::from_raw_parts(ptr, len, len)
    };
    // The buffer is taken out while the hook runs, so nothing is borrowed across user code.
    let mut output = RETURN.with(|cell| std::mem::take(&mut cell.borrow_mut().0));
    output.clear();
    handle_into(hook, kind, &input, &mut output);
    drop(input);
    RETURN.with(|cell| {
        let mut cell = cell.borrow_mut();
        // Pointers and lengths are 32-bit on wasm32, the only target this runs on.
        cell.1 = [output.as_ptr() as usize as u32, output.len() as u32];
        cell.0 = output;
        cell.1.as_ptr()
    })
}

/// The body of `cabi_post_*`: the output has been copied; its buffer is kept for the next
/// call (unless it grew large). With the call arena ([`crate::arena`]) the buffer goes too,
/// and the arena starts over: nothing of the call is left.
#[allow(unsafe_code)]
pub fn post_return() {
    RETURN.with(|cell| {
        let mut cell = cell.borrow_mut();
        if crate::arena::ACTIVE || cell.0.capacity() > KEEP_OUTPUT_CAPACITY {
            cell.0 = Vec::new();
        } else {
            cell.0.clear();
        }
        cell.1 = [0, 0];
    });
    // Safety: the input was dropped by `call`, the output just now, and the hook value
    // `export_hook!` made for the call went with the call.
    unsafe { crate::arena::end_of_call() };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Action, Hook};

    #[derive(Default)]
    struct Limit;

    impl Hook for Limit {
        fn on_message(&self, event: &Event) -> Vec<Action> {
            if event.content_u64("amount") > event.config_u64("max") {
                vec![Action::reject("too much")]
            } else {
                Vec::new()
            }
        }
    }

    fn event(amount: u64) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "abi_version": 1, "hook": "on_message", "now": 5,
            "conversation": {
                "id": "c1", "template": "t", "revision": "r", "status": "active",
                "initiator": "a", "participants": ["b"], "future_field": true,
                "threads": [{"participant": "b", "state": "start"}],
                "vars": {}, "parameters": {}, "context": null, "retry_attempts": 0
            },
            "message": {"id": "m1", "performative": "request", "sender": "a",
                        "receivers": ["b"], "content": {"amount": amount}},
            "config": {"max": 100}
        }))
        .expect("json")
    }

    #[test]
    fn handle_runs_the_hook_on_json() {
        let out: Output =
            serde_json::from_slice(&handle(&Limit, HookKind::OnMessage, &event(500))).expect("out");
        assert_eq!(out.actions, vec![Action::reject("too much")]);
        let out = handle(&Limit, HookKind::OnMessage, &event(50));
        assert_eq!(out, b"{}");
        // The default methods do nothing.
        assert_eq!(handle(&Limit, HookKind::OnStart, &event(500)), b"{}");
    }

    #[test]
    fn unreadable_event_is_answered_with_a_rejection() {
        let out: Output =
            serde_json::from_slice(&handle(&Limit, HookKind::OnMessage, b"[]")).expect("out");
        assert!(
            matches!(&out.actions[..], [Action::Reject { reason }] if reason.contains("cannot read"))
        );
    }

    #[test]
    fn actions_serialize_like_the_template_vocabulary() {
        let json = serde_json::to_value(vec![
            Action::Continue,
            Action::route_to(["risk"]),
            Action::retry(1000, 2.0, 3),
            Action::set_var("status", "pending"),
        ])
        .expect("json");
        assert_eq!(
            json,
            serde_json::json!([
                "continue",
                {"route": {"to": ["risk"], "mode": "add"}},
                {"retry": {"after_ms": 1000, "backoff": 2.0, "max_attempts": 3}},
                {"set_vars": {"status": "pending"}}
            ])
        );
    }

    #[test]
    fn realloc_allocates_and_grows() {
        #[allow(unsafe_code)]
        // SAFETY: the blocks come from `realloc` with the sizes and alignment given back.
        unsafe {
            let block = realloc(std::ptr::null_mut(), 0, 1, 4);
            assert!(!block.is_null());
            block.copy_from_nonoverlapping(b"abcd".as_ptr(), 4);
            let grown = realloc(block, 4, 1, 8);
            assert_eq!(std::slice::from_raw_parts(grown, 4), b"abcd");
            alloc::dealloc(grown, Layout::from_size_align(8, 1).expect("layout"));
        }
    }
}
