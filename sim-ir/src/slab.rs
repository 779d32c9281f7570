//! Slots of a `Vec<Option<T>>` reused through a free list: ids stay stable while values come
//! and go, and a steady state allocates nothing (the engine's flow table, the event queue's
//! slab).

/// Puts `value` into a free slot of `slots` (the most recently freed one, still warm in the
/// cache), or a new one; returns its index. Whoever empties a slot pushes it onto `free`.
pub fn insert<T>(slots: &mut Vec<Option<T>>, free: &mut Vec<u32>, value: T) -> u32 {
    match free.pop() {
        Some(i) => {
            slots[i as usize] = Some(value);
            i
        }
        None => {
            slots.push(Some(value));
            (slots.len() - 1) as u32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_freed_slot_is_reused_before_the_table_grows() {
        let (mut slots, mut free) = (Vec::new(), Vec::new());
        assert_eq!(insert(&mut slots, &mut free, 'a'), 0);
        assert_eq!(insert(&mut slots, &mut free, 'b'), 1);
        slots[0] = None;
        free.push(0);
        assert_eq!(insert(&mut slots, &mut free, 'c'), 0);
        assert_eq!(insert(&mut slots, &mut free, 'd'), 2);
        assert_eq!(slots, vec![Some('c'), Some('b'), Some('d')]);
    }
}
