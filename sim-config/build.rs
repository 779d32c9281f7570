//! Embeds `configs/{gpus,models,compute,clusters}/*.toml`, `configs/frameworks.toml` and
//! `configs/hosts.toml` so the binary works from any directory, without the source tree
//! beside it.
use std::{env, fs, path::Path};

fn main() {
    let manifest = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let configs = Path::new(&manifest).join("../configs");
    let mut out = String::new();
    for dir in ["gpus", "models", "compute", "clusters"] {
        let path = configs.join(dir);
        println!("cargo:rerun-if-changed={}", path.display());
        let mut files: Vec<_> = fs::read_dir(&path)
            .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        files.retain(|p| p.extension().is_some_and(|e| e == "toml"));
        files.sort();
        out.push_str(&format!(
            "pub static {}: &[(&str, &str)] = &[\n",
            dir.to_uppercase()
        ));
        for file in files {
            println!("cargo:rerun-if-changed={}", file.display());
            let stem = file
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("utf-8 file name");
            let abs = fs::canonicalize(&file).expect("config file exists");
            out.push_str(&format!(
                "    ({stem:?}, include_str!({:?})),\n",
                abs.display().to_string()
            ));
        }
        out.push_str("];\n");
    }
    // Single files, not folders: the table of training frameworks (`sim::framework`) and the
    // host CPUs' dispatch costs (`sim::compute::host`).
    for (name, file) in [("FRAMEWORKS", "frameworks.toml"), ("HOSTS", "hosts.toml")] {
        let path = configs.join(file);
        println!("cargo:rerun-if-changed={}", path.display());
        let abs = fs::canonicalize(&path).expect("the embedded config file exists");
        out.push_str(&format!(
            "pub static {name}: &str = include_str!({:?});\n",
            abs.display().to_string()
        ));
    }
    let dest =
        Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("embedded_configs.rs");
    fs::write(dest, out).expect("write embedded_configs.rs");
}
