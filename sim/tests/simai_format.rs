//! SimAI workload files: the real ones in `tests/fixtures/simai/` parse with the values they hold
//! and survive a write/parse round trip line for line; every malformed one in
//! `tests/fixtures/bad-simai/` is one clear error naming file, line and field; no input panics.

use std::fs;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sim::interop::simai::{
    self, SimaiComm, SimaiCommGroup, SimaiCommKind, SimaiFile, SimaiHeader, SimaiLayer, SimaiPolicy,
};

const REAL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/simai");
const BAD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/bad-simai");

fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    out.sort();
    out
}

fn real(name: &str) -> SimaiFile {
    let path = Path::new(REAL).join(name);
    simai::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_real_file_parses() {
    let paths = files(REAL, "txt");
    assert_eq!(paths.len(), 4, "{paths:?}");
    for path in &paths {
        let f = simai::load(path).unwrap_or_else(|e| panic!("{e}"));
        assert!(!f.layers.is_empty(), "{}", path.display());
        assert_eq!(f.header.policy, SimaiPolicy::HybridTransformerFwdInBckwd);
        assert!(f.layers.iter().all(|l| l.dep == -1));
        for (i, l) in f.layers.iter().enumerate() {
            assert_eq!(l.line as usize, i + 3, "{}", path.display());
        }
    }
}

#[test]
fn gpt175b_values() {
    let f = real("simai-gpt175b-1024gpu-tp8-pp8-ga32.txt");
    let h = &f.header;
    assert_eq!(h.tp, Some(8));
    assert_eq!(h.ep, Some(1));
    assert_eq!(h.pp, Some(8));
    assert_eq!(h.vpp, Some(12));
    assert_eq!(h.ga, Some(32));
    assert_eq!(h.all_gpus, Some(1024));
    assert_eq!(h.dp(), Some(16));
    assert_eq!(h.pp_comm, Some(50331648));
    assert!(h.checkpoints.is_empty() && h.checkpoint_initiates.is_empty());
    assert!(!h.inference);
    assert_eq!(f.layers.len(), 814);
    assert!(f.warnings.is_empty(), "{:?}", f.warnings);

    let first = &f.layers[0];
    assert_eq!(first.name, "grad_gather");
    assert_eq!((first.fwd_ns, first.ig_ns, first.wg_ns), (1, 1, 1));
    assert_eq!(first.fwd, SimaiComm::NONE);
    assert_eq!(
        first.wg,
        SimaiComm::new(
            SimaiCommKind::AllGather,
            SimaiCommGroup::Default,
            4907335680
        )
    );
    assert_eq!(first.wg_update_ns, 100);
    assert_eq!(f.layers[1].wg.kind, SimaiCommKind::ReduceScatter);
    assert_eq!(f.layers[1].wg.bytes, 9814671360);
    assert_eq!(f.layers[2].name, "grad_param_compute");
    assert_eq!(f.layers[2].ig_ns, 34021000);
    let last = &f.layers[813];
    assert_eq!(last.name, "optimizer4");
    assert_eq!(last.line, 816);
    assert_eq!(
        last.fwd,
        SimaiComm::new(SimaiCommKind::AllReduce, SimaiCommGroup::Default, 4)
    );
    let dp_ep = f
        .layers
        .iter()
        .filter(|l| l.wg.group == SimaiCommGroup::DpEp)
        .count();
    assert_eq!(dp_ep, 2);
}

#[test]
fn moe_values() {
    let f = real("simai-moe-9216gpu.txt");
    let h = &f.header;
    assert_eq!(h.tp, Some(2));
    assert_eq!(h.ep, Some(16));
    assert_eq!(h.pp, Some(12));
    assert_eq!(h.vpp, Some(8));
    assert_eq!(h.ga, Some(24));
    assert_eq!(h.all_gpus, Some(9216));
    assert_eq!(h.dp(), Some(384));
    // `pp_comm 50331648`, without the colon.
    assert_eq!(h.pp_comm, Some(50331648));
    assert!(f.warnings.is_empty(), "{:?}", f.warnings);
    assert_eq!(f.layers.len(), 1789);
    let comms = || f.layers.iter().flat_map(|l| [l.fwd, l.ig, l.wg]);
    let count = |kind, group| {
        comms()
            .filter(|c| c.kind == kind && c.group == group)
            .count()
    };
    assert_eq!(count(SimaiCommKind::AllToAll, SimaiCommGroup::Ep), 768);
    assert_eq!(count(SimaiCommKind::AllToAll, SimaiCommGroup::Default), 768);
    assert_eq!(count(SimaiCommKind::AllGather, SimaiCommGroup::DpEp), 1);
    assert_eq!(count(SimaiCommKind::ReduceScatter, SimaiCommGroup::DpEp), 1);
    assert_eq!(
        f.layers
            .iter()
            .filter(|l| l.name.starts_with("mlp_moelayer"))
            .count(),
        1344
    );
}

#[test]
fn small_files_with_spaces_and_no_final_newline() {
    let tp = real("simai-tp8-allreduce-8gpu.txt");
    assert_eq!(tp.header.tp, Some(8));
    assert_eq!(tp.header.pp, Some(1));
    assert_eq!(tp.header.all_gpus, Some(8));
    assert_eq!(tp.header.pp_comm, None);
    assert!(tp.warnings.is_empty(), "{:?}", tp.warnings);
    assert_eq!(tp.layers.len(), 2);
    let l = &tp.layers[1];
    assert_eq!(l.name, "embedding_layer");
    assert_eq!(l.fwd_ns, 556000);
    assert_eq!(
        l.fwd,
        SimaiComm::new(SimaiCommKind::AllReduce, SimaiCommGroup::Default, 67108864)
    );
    assert_eq!((l.ig, l.wg), (SimaiComm::NONE, SimaiComm::NONE));
    assert_eq!(l.wg_update_ns, 1);

    let dp = real("simai-dp-allreduce-64MiB-16gpu.txt");
    assert_eq!(dp.header.all_gpus, Some(16));
    assert_eq!(dp.header.dp(), Some(2));
    assert_eq!(dp.layers.len(), 1);
    assert_eq!(
        dp.layers[0].wg,
        SimaiComm::new(SimaiCommKind::AllReduce, SimaiCommGroup::Default, 64 << 20)
    );
}

/// The whitespace-separated fields of every layer line of a file (lines 3 on, non-blank).
fn layer_lines(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip(2)
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|f| !f.is_empty())
        .collect()
}

#[test]
fn real_files_round_trip_line_for_line() {
    for path in files(REAL, "txt") {
        let original = fs::read_to_string(&path).unwrap();
        let parsed = simai::parse(&original, &path.display().to_string()).unwrap();
        let written = simai::write(&parsed);
        assert!(written.ends_with('\n'));
        // Every layer line keeps its name and all 12 fields, token for token, now tab-separated.
        let before = layer_lines(&original);
        let after = layer_lines(&written);
        assert_eq!(before.len(), parsed.layers.len());
        assert_eq!(before, after, "{}", path.display());
        for line in written.lines().skip(2) {
            assert_eq!(line.split('\t').count(), 12, "{line}");
        }
        let again = simai::parse(&written, "written.txt").unwrap();
        assert_eq!(again, parsed, "{}", path.display());
        assert!(again.warnings.is_empty(), "{:?}", again.warnings);
        for (a, b) in again.layers.iter().zip(&parsed.layers) {
            assert_eq!(a.line, b.line, "line numbers survive (same layout)");
        }
        assert_eq!(simai::write(&again), written, "writing is stable");
    }
}

#[test]
fn every_bad_fixture_is_one_clear_error() {
    let paths = files(BAD, "txt");
    assert!(paths.len() >= 15, "only {} bad fixtures", paths.len());
    for path in &paths {
        let name = path.display().to_string();
        let expect_path = path.with_extension("expect");
        let expect = fs::read_to_string(&expect_path)
            .unwrap_or_else(|e| panic!("{}: {e}", expect_path.display()));
        let expect = expect.trim();
        assert!(!expect.is_empty(), "{name}: empty .expect");
        let bytes = fs::read(path).unwrap();
        let err = match simai::parse_bytes(&bytes, &name) {
            Ok(f) => panic!("{name}: parsed without error: {f:?}"),
            Err(e) => e.to_string(),
        };
        let file_name = path.file_name().unwrap().to_string_lossy();
        assert!(
            err.contains(&*file_name),
            "{name}: error does not name the file: {err}"
        );
        assert!(
            err.contains(expect),
            "{name}: expected `{expect}` in: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{name}: not one line: {err}");
        // The same through `load`.
        let loaded = simai::load(path).map(|_| ()).map_err(|e| e.to_string());
        assert_eq!(loaded, Err(err), "{name}");
    }
}

/// Random edits of a real file's bytes: replace, insert or delete at a position.
#[derive(Debug, Clone)]
enum Edit {
    Set(usize, u8),
    Insert(usize, u8),
    Delete(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    // Bytes that matter to the format are drawn more often than the rest.
    let byte = prop_oneof![
        3 => any::<u8>(),
        2 => prop::sample::select(b"\t \n\r:-+.0123456789_E".to_vec()),
    ];
    prop_oneof![
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Edit::Set(i, b)),
        (any::<usize>(), byte).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<usize>().prop_map(Edit::Delete),
    ]
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let len = bytes.len();
        match *e {
            Edit::Set(i, b) if len > 0 => bytes[i % len] = b,
            Edit::Insert(i, b) => bytes.insert(i % (len + 1), b),
            Edit::Delete(i) if len > 0 => {
                bytes.remove(i % len);
            }
            _ => {}
        }
    }
    bytes
}

/// Whatever parses can be written and read back equal.
fn check_round_trip(f: &SimaiFile) {
    let written = simai::write(f);
    let again = simai::parse(&written, "again.txt")
        .unwrap_or_else(|e| panic!("written file does not parse: {e}\n{written}"));
    assert_eq!(&again, f);
}

fn layer_strategy(customized: bool) -> impl Strategy<Value = SimaiLayer> {
    let comm = (
        prop::sample::select(SimaiCommKind::ALL.to_vec()),
        prop::sample::select(vec![
            SimaiCommGroup::Default,
            SimaiCommGroup::Ep,
            SimaiCommGroup::DpEp,
        ]),
        prop_oneof![Just(0u64), any::<u64>()],
    )
        .prop_map(|(k, g, b)| SimaiComm::new(k, g, b));
    (
        "[a-zA-Z0-9_.é]{1,16}",
        any::<i64>(),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        (comm.clone(), comm.clone(), comm),
        "[A-Z_]{1,12}",
    )
        .prop_map(
            move |(name, dep, (f, i, w, u), (fc, ic, wc), policy)| SimaiLayer {
                name,
                dep,
                fwd_ns: f,
                fwd: fc,
                ig_ns: i,
                ig: ic,
                wg_ns: w,
                wg: wc,
                wg_update_ns: u,
                policy: customized.then_some(policy),
                line: 0,
            },
        )
}

fn file_strategy() -> impl Strategy<Value = SimaiFile> {
    let positive = prop::option::of(1u32..=u32::MAX);
    let any_u32 = prop::option::of(any::<u32>());
    (
        prop::sample::select(SimaiPolicy::ALL.to_vec()),
        (positive.clone(), any_u32.clone(), positive.clone()),
        (any_u32, positive.clone(), positive),
        prop::collection::vec(any::<u32>(), 0..4),
        prop::collection::vec(any::<u32>(), 0..4),
        prop::option::of(any::<u64>()),
        any::<bool>(),
    )
        .prop_flat_map(
            |(policy, (tp, ep, pp), (vpp, ga, all_gpus), cps, cpis, pp_comm, inference)| {
                let header = SimaiHeader {
                    policy,
                    tp,
                    ep,
                    pp,
                    vpp,
                    ga,
                    all_gpus,
                    checkpoints: cps,
                    checkpoint_initiates: cpis,
                    pp_comm,
                    inference,
                };
                let customized = policy == SimaiPolicy::HybridCustomized;
                prop::collection::vec(layer_strategy(customized), 0..20).prop_map(move |layers| {
                    SimaiFile {
                        header: header.clone(),
                        layers,
                        warnings: Vec::new(),
                    }
                })
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,300}") {
        if let Ok(f) = simai::parse(&text, "random.txt") {
            check_round_trip(&f);
        }
    }

    #[test]
    fn random_format_like_text_never_panics(
        text in "(HYBRID_CUSTOMIZED|DATA|HYBRID_TRANSFORMER|pp_comm|pp:|checkpoints:|mode:|-?[0-9]{1,22}|ALLREDUCE(_EP|_DP_EP)?|NONE|[ \t\r\n]|x){0,60}"
    ) {
        if let Ok(f) = simai::parse(&text, "random.txt") {
            check_round_trip(&f);
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = simai::parse_bytes(&bytes, "random.bin");
    }

    #[test]
    fn mutated_real_files_never_panic(
        which in 0usize..4,
        edits in prop::collection::vec(edit(), 1..8),
    ) {
        let path = &files(REAL, "txt")[which];
        let bytes = apply(fs::read(path).unwrap(), &edits);
        match simai::parse_bytes(&bytes, "mutated.txt") {
            Ok(f) => check_round_trip(&f),
            Err(e) => {
                let e = e.to_string();
                prop_assert!(e.starts_with("mutated.txt"), "{}", e);
                prop_assert_eq!(e.lines().count(), 1, "{}", e);
            }
        }
    }

    #[test]
    fn written_workloads_read_back_equal(f in file_strategy()) {
        let text = simai::write(&f);
        prop_assert!(text.ends_with('\n'));
        let back = simai::parse(&text, "w.txt").unwrap_or_else(|e| panic!("{e}\n{text}"));
        prop_assert_eq!(&back, &f);
        for (i, l) in back.layers.iter().enumerate() {
            prop_assert_eq!(l.line as usize, i + 3);
        }
    }
}
