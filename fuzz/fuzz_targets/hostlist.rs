//! Slurm host lists: `sim::hostlist` (the scan that bounds an expansion, then
//! hostlist-parser) and the Slurm task that reads `SLURM_JOB_NODELIST` with it.
#![no_main]

use coordinator::slurm::{MAX_NODELIST_HOSTS, SlurmTask};
use libfuzzer_sys::fuzz_target;
use sim::hostlist::{expand, scan};

fuzz_target!(|data: &[u8]| {
    let Ok(list) = std::str::from_utf8(data) else {
        return;
    };
    match scan(list) {
        // What the scan cannot read, the crate refuses (before it expands anything).
        Ok(None) => assert!(hostlist_parser::parse(list).is_err(), "{list:?}"),
        // The scan's count and longest name bound what the crate makes.
        Ok(Some(s)) => {
            if let Ok(names) = expand(list, MAX_NODELIST_HOSTS, "the limit") {
                assert!(names.len() as u64 <= s.names, "{list:?}");
                assert!(
                    names.iter().all(|n| n.chars().count() as u64 <= s.longest),
                    "{list:?}"
                );
            }
        }
        Err(_) => {}
    }
    let _ = SlurmTask::from_env(|variable| {
        Some(match variable {
            "SLURM_PROCID" => "1".to_string(),
            "SLURM_NTASKS" => "2".to_string(),
            "SLURM_JOB_ID" => "7".to_string(),
            "SLURM_JOB_NODELIST" => list.to_string(),
            _ => return None,
        })
    });
});
