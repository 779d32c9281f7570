//! SimAI files through the IR and back: every layer line survives, and every real file
//! imports.

use std::path::{Path, PathBuf};

use sim::experiment::Experiment;
use sim::interop::simai::{self, SimaiFile};
use sim::interop::simai_convert::{import, to_simai};
use sim::workload::{Kernel, Shape, compile};

fn real_files() -> Vec<PathBuf> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/simai");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("fixtures/simai")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    files
}

fn ns(k: &Kernel) -> u64 {
    match k.shape {
        Shape::Fixed { ns } => ns,
        _ => k.flops / 1_000_000 + k.bytes / 1_000,
    }
}

fn through_ir(file: &SimaiFile, name: &str) -> SimaiFile {
    let world = file.header.all_gpus.expect("all_gpus");
    let w = import(file, name, world).unwrap_or_else(|e| panic!("{name}: {e}"));
    let text = simai::write(&to_simai(&w, &ns));
    simai::parse(&text, name).unwrap_or_else(|e| panic!("{name} re-parse: {e}"))
}

#[test]
fn every_real_file_keeps_every_layer_line() {
    let files = real_files();
    assert!(files.len() >= 4, "{files:?}");
    for path in files {
        let name = path.display().to_string();
        let file = simai::load(&path).expect("parse");
        let back = through_ir(&file, &name);
        assert_eq!(back.layers.len(), file.layers.len(), "{name}");
        for (a, b) in file.layers.iter().zip(&back.layers) {
            assert_eq!(a, b, "{name} line {}", a.line);
        }
        assert_eq!(back.header.tp, file.header.tp);
        assert_eq!(back.header.pp, file.header.pp);
        assert_eq!(back.header.all_gpus, file.header.all_gpus);
    }
}

#[test]
fn compiled_export_survives_import() {
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/experiments/mixtral-8x7b-h100-256.toml"
    ));
    let exp = Experiment::load(path, &sim::config::Overrides::none()).expect("load");
    let w = compile(&exp).expect("compile");
    let first = to_simai(&w, &ns);
    assert!(first.layers.iter().any(|l| l.name == "mlp_moelayer"));
    assert_eq!(first.header.ga, Some(exp.micro_batches as u32));
    let text = simai::write(&first);
    let parsed = simai::parse(&text, "export").expect("parse export");
    let second = through_ir(&parsed, "export");
    assert_eq!(second.layers, first.layers);
}
