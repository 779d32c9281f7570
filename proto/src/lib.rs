//! Wire types of the coordinator/worker protocol, generated from `fleetsim.proto`.
//!
//! Invariant: only this crate defines wire types; it knows nothing of simulation semantics.
#![allow(missing_debug_implementations, unreachable_pub, clippy::all)]

/// Encoding and sizes of the wire types.
pub use prost::Message;

pub mod v1 {
    tonic::include_proto!("fleetsim.v1");
}

#[cfg(test)]
mod tests {
    use prost::Message;

    #[test]
    fn window_report_round_trips() {
        let report = super::v1::WindowReport {
            worker_id: 3,
            window: 7,
            next_event: Some(super::v1::Picoseconds { value: u64::MAX }),
            earliest_sent: Some(super::v1::Picoseconds { value: 1_000_000 }),
            promise: Some(super::v1::Picoseconds { value: 3_000_000 }),
            waiting_distance: Some(super::v1::Picoseconds { value: u64::MAX }),
            batches_sent: vec![0, 2, 1],
            events_processed: 42,
            checkpointed: 5,
            stop_requested: true,
        };
        let bytes = report.encode_to_vec();
        assert_eq!(
            super::v1::WindowReport::decode(bytes.as_slice()).unwrap(),
            report
        );
    }
}
