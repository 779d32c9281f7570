//! A cache hint: the one `unsafe` in the workspace.
#![allow(unsafe_code)]

/// Asks the CPU to start loading the cache line at `p`. A hint only: it never faults and
/// never reads through `p`, so any address (null, dangling) is sound.
#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 does not access memory architecturally; it cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
