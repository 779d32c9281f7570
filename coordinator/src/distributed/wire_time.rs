//! `SimTime` across the wire: the proto's `Picoseconds` on one side, `SimTime` on the other,
//! converted here and nowhere else.

use fleetsim_proto::v1 as pb;
use sim_ir::time::SimTime;

/// A time for a proto field.
pub(super) fn to_wire(time: SimTime) -> Option<pb::Picoseconds> {
    Some(pb::Picoseconds {
        value: time.as_ps(),
    })
}

/// A time from an optional proto field (absent: none).
pub(super) fn optional(field: Option<pb::Picoseconds>) -> Option<SimTime> {
    field.map(|p| SimTime::from_ps(p.value))
}

/// A time from a proto field every sender sets; a peer that left it out speaks another
/// protocol, and the message names the field.
pub(super) fn required(
    field: Option<pb::Picoseconds>,
    message: &str,
    name: &str,
) -> Result<SimTime, String> {
    optional(field).ok_or_else(|| {
        format!("a {message} without its `{name}` time: the peer runs another fleetsim protocol")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_cross_unchanged_and_a_missing_one_is_named() {
        for ps in [0, 1, 7_000_000, u64::MAX] {
            let t = SimTime::from_ps(ps);
            assert_eq!(required(to_wire(t), "report", "end"), Ok(t));
        }
        assert_eq!(optional(None), None);
        let e = required(None, "window grant", "end").expect_err("missing");
        assert!(e.contains("`end`") && e.contains("window grant"), "{e}");
    }
}
