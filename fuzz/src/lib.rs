//! What every fuzz target shares: a global allocator that bounds the heap of the code under
//! test, and the folders the targets read.
//!
//! The targets are built without a sanitizer (`cargo fuzz run -s none`), where libFuzzer's
//! `-malloc_limit_mb` cannot see allocations; [`Bounded`] enforces the same bound itself: an
//! allocation that would take the Rust heap above [`HEAP_LIMIT`] (live bytes, so also any
//! single allocation above it) fails, Rust aborts with "memory allocation of N bytes failed",
//! and libFuzzer keeps the input as a crash. `-rss_limit_mb=1024` bounds the whole process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The most bytes the code under test may hold on the heap at once: 512 MiB.
pub const HEAP_LIMIT: usize = 512 << 20;

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, failing any allocation past [`HEAP_LIMIT`] live bytes.
pub struct Bounded;

fn reserve(bytes: usize) -> bool {
    let before = LIVE.fetch_add(bytes, Ordering::Relaxed);
    if before.saturating_add(bytes) > HEAP_LIMIT {
        LIVE.fetch_sub(bytes, Ordering::Relaxed);
        return false;
    }
    true
}

fn release(bytes: usize) {
    LIVE.fetch_sub(bytes, Ordering::Relaxed);
}

// Safety: every call is passed on to `System` unchanged; only the count is added.
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            release(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !reserve(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            release(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        release(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        if new_size > old && !reserve(new_size - old) {
            return std::ptr::null_mut();
        }
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            if new_size > old {
                release(new_size - old);
            }
        } else if new_size < old {
            release(old - new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Bounded = Bounded;

/// The heap's live bytes now.
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("fuzz/ is inside the repository")
        .to_path_buf()
}

/// A scratch folder of this process, made once.
pub fn scratch() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("fleetsim-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch folder");
        dir
    })
}
