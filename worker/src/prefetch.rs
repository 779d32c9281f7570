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

/// Asks for every cache line a span touches (none for an empty span).
#[inline(always)]
pub fn prefetch_span(span: sim_engine::HotSpan) {
    for line in lines(span) {
        prefetch(line);
    }
}

const LINE: usize = 64;

/// The start of every cache line that `len` bytes from `first` touch (none when `len` is 0).
fn lines((first, len): sim_engine::HotSpan) -> impl Iterator<Item = *const u8> {
    let offset = first as usize % LINE;
    let start = first.wrapping_sub(offset);
    let end = if len == 0 { 0 } else { offset + len };
    (0..end).step_by(LINE).map(move |at| start.wrapping_add(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_asks_for_every_line_it_touches() {
        let at = |a: usize| a as *const u8;
        let lines_of = |first, len| {
            lines((at(first), len))
                .map(|p| p as usize)
                .collect::<Vec<_>>()
        };
        assert_eq!(lines_of(100, 30), vec![64, 128]);
        assert_eq!(lines_of(128, 64), vec![128]);
        assert_eq!(lines_of(130, 208), vec![128, 192, 256, 320]);
        assert!(lines_of(0, 0).is_empty());
        assert!(lines_of(100, 0).is_empty());
    }
}
