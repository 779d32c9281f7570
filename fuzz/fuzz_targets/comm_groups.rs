//! ASTRA-sim's `comm_groups.json` beside Chakra traces, read for a 16-GPU cluster.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sim::interop::chakra_convert::parse_comm_groups;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(groups) = parse_comm_groups(text, "comm_groups.json", 16) {
        for members in groups.values() {
            assert!(members.len() <= 16);
            assert!(members.windows(2).all(|p| p[0] < p[1]));
        }
    }
});
