//! The call arena: an allocator for hooks that keep nothing between calls. Opt in with the
//! crate feature `call-arena`: the SDK then installs it as the global allocator (on wasm),
//! and the exports [`crate::export_hook!`] writes empty it after every call.
//!
//! # Why
//! A hook call allocates a few dozen small blocks (the event's lists, the actions, the
//! answer) and frees all of them before it returns. Rust's default wasm allocator
//! (dlmalloc) keeps free lists for that: about a tenth of a call of the credit-assessment
//! hook. The arena hands out memory by moving a pointer, frees nothing one block at a time,
//! and goes back to its start once the host has copied the answer (`cabi_post_*`).
//!
//! # The price
//! Nothing allocated during a call may be used after it: after the call the arena hands the
//! same memory out again. The SDK already asks hooks to keep their state in the
//! conversation (`set_vars`), not in statics; with this feature that is a rule of memory
//! safety, not only of correctness. A hook that builds heap data once and keeps it (a lazily
//! initialised static, a `thread_local!` cache) must not enable it.
//!
//! Freed blocks are not reused within a call, so a call can use at most the template's
//! memory cap in total, freed or not. Memory grown for one call stays with the instance and
//! serves the next ones (wasm memory never shrinks).
//!
//! # Where the memory comes from
//! The arena grows the linear memory itself (`memory.grow`) and uses only pages it grew.
//! If something else grew the memory in between (it should not, as the only allocator),
//! the arena does not assume the pages between are its own: it starts over in the new
//! pages and leaves the older ones alone.

use std::alloc::Layout;

/// The bytes a wasm page holds.
pub const PAGE: usize = 64 * 1024;

/// The bookkeeping of the arena, apart from the memory it manages (so it can be tested
/// natively): it owns the addresses `base..end`, of which `base..next` are handed out.
#[derive(Debug, Default)]
pub struct Bump {
    base: usize,
    next: usize,
    end: usize,
}

impl Bump {
    /// An arena that owns no memory yet.
    pub const fn new() -> Bump {
        Bump {
            base: 0,
            next: 0,
            end: 0,
        }
    }

    /// The address of a block for `layout`, growing the memory through `grow` if the arena
    /// is full, or `None` when the memory cannot grow. `grow(pages)` adds `pages` pages and
    /// returns the size the memory had before, in pages (what `memory.grow` returns), or
    /// `None`.
    pub fn alloc(
        &mut self,
        layout: Layout,
        grow: impl FnOnce(usize) -> Option<usize>,
    ) -> Option<usize> {
        if let Some(start) = fit(self.next, self.end, layout) {
            self.next = start + layout.size();
            return Some(start);
        }
        // Enough pages for the block wherever its alignment puts it.
        let need = layout.size().checked_add(layout.align())?;
        let pages = need.checked_add(PAGE - 1)? / PAGE;
        let old_end = grow(pages)?.checked_mul(PAGE)?;
        let new_end = old_end.checked_add(pages.checked_mul(PAGE)?)?;
        if old_end != self.end || self.end == 0 {
            // Not adjoining what the arena owns (or the first growth): start over there.
            // Never address 0: that is the null pointer (a memory of no pages at all).
            self.base = old_end.max(1);
            self.next = self.base;
        }
        self.end = new_end;
        let start = fit(self.next, self.end, layout)?;
        self.next = start + layout.size();
        Some(start)
    }

    /// Resizes the block at `ptr` (of `old_size` bytes) to `new_size` in place when it is
    /// the last block handed out and the arena has the room; `false` otherwise (the caller
    /// copies it into a new block).
    pub fn resize_in_place(&mut self, ptr: usize, old_size: usize, new_size: usize) -> bool {
        let last = ptr.checked_add(old_size) == Some(self.next) && ptr >= self.base;
        match ptr.checked_add(new_size) {
            Some(new_next) if last && new_next <= self.end => {
                self.next = new_next;
                true
            }
            _ => false,
        }
    }

    /// Forgets every block handed out: the next one starts at the beginning again.
    pub fn reset(&mut self) {
        self.next = self.base;
    }

    /// Bytes handed out since the last reset.
    pub fn used(&self) -> usize {
        self.next - self.base
    }
}

/// The start of a block for `layout` between `next` and `end`, if it fits.
fn fit(next: usize, end: usize, layout: Layout) -> Option<usize> {
    let start = next.checked_add(layout.align() - 1)? & !(layout.align() - 1);
    (start.checked_add(layout.size())? <= end && end != 0).then_some(start)
}

/// Whether this build allocates from the call arena (the `call-arena` feature, on wasm).
pub const ACTIVE: bool = cfg!(all(feature = "call-arena", target_arch = "wasm32"));

#[cfg(all(feature = "call-arena", target_arch = "wasm32"))]
#[global_allocator]
static CALL_ARENA: wasm::CallArena = wasm::CallArena::new();

/// The end of a call, after the host copied the answer: with the arena, every block handed
/// out is forgotten; without it, nothing happens.
///
/// # Safety
/// No block allocated before may be used after (the exports drop everything of the call
/// first).
#[allow(unsafe_code)]
pub(crate) unsafe fn end_of_call() {
    #[cfg(all(feature = "call-arena", target_arch = "wasm32"))]
    CALL_ARENA.reset();
}

#[cfg(all(feature = "call-arena", target_arch = "wasm32"))]
#[allow(unsafe_code)]
mod wasm {
    use std::alloc::{GlobalAlloc, Layout};
    use std::cell::UnsafeCell;

    use super::Bump;

    /// The arena as the global allocator. A wasm instance runs one thread, so the
    /// bookkeeping needs no lock.
    pub struct CallArena {
        bump: UnsafeCell<Bump>,
    }

    // wasm32-unknown-unknown without the atomics feature has one thread.
    unsafe impl Sync for CallArena {}

    impl CallArena {
        pub const fn new() -> CallArena {
            CallArena {
                bump: UnsafeCell::new(Bump::new()),
            }
        }

        #[allow(clippy::mut_from_ref)]
        unsafe fn bump(&self) -> &mut Bump {
            &mut *self.bump.get()
        }

        /// See [`super::end_of_call`].
        pub unsafe fn reset(&self) {
            self.bump().reset();
        }
    }

    fn grow(pages: usize) -> Option<usize> {
        match core::arch::wasm32::memory_grow(0, pages) {
            usize::MAX => None,
            old => Some(old),
        }
    }

    unsafe impl GlobalAlloc for CallArena {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            match self.bump().alloc(layout, grow) {
                Some(address) => address as *mut u8,
                None => std::ptr::null_mut(),
            }
        }

        unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            if self
                .bump()
                .resize_in_place(ptr as usize, layout.size(), new_size)
            {
                return ptr;
            }
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
            }
            new
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memory of `pages` pages that grows like `memory.grow`, up to `max` pages.
    struct Memory {
        pages: usize,
        max: usize,
    }

    impl Memory {
        fn grow(&mut self) -> impl FnOnce(usize) -> Option<usize> + '_ {
            move |add| {
                if self.pages + add > self.max {
                    return None;
                }
                let old = self.pages;
                self.pages += add;
                Some(old)
            }
        }
    }

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).expect("layout")
    }

    #[test]
    fn blocks_are_aligned_disjoint_and_in_grown_pages_only() {
        let mut memory = Memory {
            pages: 17,
            max: 100,
        };
        let mut bump = Bump::new();
        let a = bump.alloc(layout(3, 1), memory.grow()).expect("a");
        assert_eq!(
            a,
            17 * PAGE,
            "the first block is in the first page the arena grew"
        );
        let b = bump.alloc(layout(8, 8), memory.grow()).expect("b");
        assert_eq!(b % 8, 0);
        assert!(b >= a + 3);
        let c = bump.alloc(layout(1, 1), memory.grow()).expect("c");
        assert_eq!(c, b + 8);
        assert_eq!(memory.pages, 18, "one page grown for three small blocks");
    }

    #[test]
    fn a_block_larger_than_a_page_grows_enough_pages() {
        let mut memory = Memory { pages: 1, max: 100 };
        let mut bump = Bump::new();
        let small = bump.alloc(layout(10, 1), memory.grow()).expect("small");
        let big = bump
            .alloc(layout(3 * PAGE, 16), memory.grow())
            .expect("big");
        assert_eq!(big % 16, 0);
        assert!(big >= small + 10);
        assert!(big + 3 * PAGE <= memory.pages * PAGE);
    }

    #[test]
    fn reset_hands_out_the_same_memory_again_without_growing() {
        let mut memory = Memory { pages: 1, max: 100 };
        let mut bump = Bump::new();
        let first = bump.alloc(layout(100, 4), memory.grow()).expect("first");
        bump.alloc(layout(5000, 4), memory.grow()).expect("second");
        assert_eq!(bump.used(), 5100);
        let pages = memory.pages;
        bump.reset();
        assert_eq!(bump.used(), 0);
        let again = bump.alloc(layout(100, 4), memory.grow()).expect("again");
        assert_eq!(again, first);
        assert_eq!(memory.pages, pages);
    }

    #[test]
    fn memory_grown_by_someone_else_is_never_handed_out() {
        let mut memory = Memory { pages: 1, max: 100 };
        let mut bump = Bump::new();
        let first = bump
            .alloc(layout(PAGE - 8, 1), memory.grow())
            .expect("first");
        // Someone else grows two pages after the arena's.
        let foreign = memory.pages * PAGE..(memory.pages + 2) * PAGE;
        memory.pages += 2;
        let second = bump.alloc(layout(64, 8), memory.grow()).expect("second");
        assert!(!foreign.contains(&second));
        assert!(second >= foreign.end);
        // A reset starts over in the new pages, not at the old base below the foreign ones.
        bump.reset();
        let third = bump.alloc(layout(64, 8), memory.grow()).expect("third");
        assert!(!foreign.contains(&third) && third != first);
    }

    #[test]
    fn no_memory_left_is_none() {
        let mut memory = Memory { pages: 1, max: 2 };
        let mut bump = Bump::new();
        assert!(bump.alloc(layout(2 * PAGE, 1), memory.grow()).is_none());
        assert!(bump.alloc(layout(PAGE / 2, 1), memory.grow()).is_some());
        assert!(bump
            .alloc(layout(isize::MAX as usize - 8, 1), memory.grow())
            .is_none());
    }

    #[test]
    fn only_the_last_block_resizes_in_place_and_only_within_the_arena() {
        let mut memory = Memory { pages: 1, max: 100 };
        let mut bump = Bump::new();
        let a = bump.alloc(layout(16, 8), memory.grow()).expect("a");
        let b = bump.alloc(layout(16, 8), memory.grow()).expect("b");
        assert!(!bump.resize_in_place(a, 16, 32), "a is not last");
        assert!(bump.resize_in_place(b, 16, 1000));
        let c = bump.alloc(layout(1, 1), memory.grow()).expect("c");
        assert_eq!(c, b + 1000, "the next block follows the grown one");
        assert!(!bump.resize_in_place(c, 1, 10 * PAGE), "beyond the arena");
        assert!(bump.resize_in_place(c, 1, 0), "shrinking the last block");
        assert_eq!(bump.used(), c - a);
    }
}
