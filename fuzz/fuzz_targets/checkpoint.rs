//! Checkpoints: every input is read as a worker's part file (all records, and every other
//! LP's, skipping the rest) and as the coordinator's manifest `checkpoint.json`.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let size = data.len() as u64;
    let mut records = Vec::new();
    let _ = worker::checkpoint::read_part(Cursor::new(data), size, |_| true, &mut records);
    records.clear();
    let _ = worker::checkpoint::read_part(Cursor::new(data), size, |id| id % 2 == 0, &mut records);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = coordinator::checkpoint::parse_manifest(text, "checkpoint.json");
    }
});
