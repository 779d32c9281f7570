//! SimAI workload files: the text parser, the import into the IR (on as many GPUs as the
//! header's `all_gpus`, at most 4,096, else 16), and the writer, whose output must parse back
//! to the same workload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sim::interop::{simai, simai_convert};

fuzz_target!(|data: &[u8]| {
    let Ok(file) = simai::parse_bytes(data, "fuzz.txt") else {
        return;
    };
    let back = simai::parse(&simai::write(&file), "written.txt");
    assert_eq!(back.as_ref().ok(), Some(&file), "{back:?}");
    let world = file.header.all_gpus.filter(|&w| w <= 4096).unwrap_or(16);
    let _ = simai_convert::import(&file, "fuzz.txt", world);
});
