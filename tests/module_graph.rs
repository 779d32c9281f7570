//! No circles between files (ARCHITECTURE.md, "Cross-cutting rules"): within each crate, no
//! two files import each other, directly or around a loop, so a newcomer can read the files
//! from the ground up. A file's arrows are the `crate::` and `super::` paths its code names
//! (in `use` trees and inline), each to the deepest module file the path reaches; a module
//! naming its own submodules is containment, not an arrow. Comments, string literals and the
//! trailing `#[cfg(test)]` block are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates' source folders, relative to the workspace (`chakra` is one file, `proto`
/// generated).
const CRATES: &[&str] = &[
    "src",
    "sim-ir/src",
    "sim-config/src",
    "sim-models/src",
    "sim/src",
    "sim-engine/src",
    "partitioner/src",
    "worker/src",
    "coordinator/src",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file: `lib.rs` is the crate, `a.rs` and `a/mod.rs` are `a`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("file under its crate");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

/// The code of a file: comments and string contents blanked, the trailing test module cut.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(text.len(), |n| i + n);
            i = end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(text.len(), |n| i + n + 2);
            i = end;
        } else if let Some(raw) = rest.strip_prefix("r#\"") {
            let end = raw.find("\"#").map_or(text.len(), |n| i + 3 + n + 2);
            out.push_str("\"\"");
            i = end;
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
        } else if rest.starts_with("'\"'") {
            out.push_str("' '");
            i += 3;
        } else {
            let c = rest.chars().next().expect("a char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A `use` tree without its renames (`a::{b as c}` is `a::{b}`) and without whitespace.
fn without_renames(tree: &str) -> String {
    let mut out = String::new();
    let mut words = tree
        .split_inclusive(|c: char| c.is_whitespace() || c == ',' || c == '{' || c == '}')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .peekable();
    while let Some(word) = words.next() {
        if word == "as" {
            // The alias, with whatever punctuation closed it.
            if let Some(alias) = words.next() {
                out.extend(alias.chars().filter(|c| !is_ident(*c)));
            }
        } else {
            out.push_str(word);
        }
    }
    out
}

/// Expands a `use` tree (`a::{b, c::{d, e as f}, *}`) into its paths.
fn expand_use(tree: &str) -> Vec<String> {
    expand(&without_renames(tree))
}

fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.trim_end_matches("::").to_string()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| {
            expand(p)
                .into_iter()
                .map(|q| format!("{prefix}{q}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The `crate::` and `super::` paths a file's code names.
fn paths_named(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    // `use` trees, which may spread over lines and braces.
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + 4..];
        rest = after;
        if before.is_some_and(is_ident) {
            continue;
        }
        let Some(end) = after.find(';') else { break };
        let tree = after[..end].trim();
        if tree.starts_with("crate::") || tree.starts_with("super::") {
            paths.extend(expand_use(tree));
        }
    }
    // Inline paths.
    for root in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(root) {
            let start = from + at;
            from = start + root.len();
            if code[..start].chars().next_back().is_some_and(is_ident) {
                continue;
            }
            let end = code[start..]
                .find(|c: char| !(is_ident(c) || c == ':'))
                .map_or(code.len(), |n| start + n);
            paths.push(code[start..end].trim_end_matches(':').to_string());
        }
    }
    paths
}

/// The module a path names from module `here`, as absolute segments.
fn absolute(here: &[String], path: &str) -> Vec<String> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<String> = Vec::new();
    if segments.first() == Some(&"crate") {
        segments.remove(0);
    } else {
        // `super` of `a/b.rs` (module a::b) is `a`; of `a/b/mod.rs` (also a::b) is `a` too.
        base = here.to_vec();
        while segments.first() == Some(&"super") {
            segments.remove(0);
            base.pop();
        }
    }
    base.extend(segments.into_iter().map(str::to_string));
    base
}

/// Strongly connected components of more than one file (Tarjan).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(targets) = s.edges.get(v) {
            for w in targets {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found
}

/// Each crate's file graph: file → files it imports.
fn file_graph(root: &Path, krate: &str) -> BTreeMap<String, BTreeSet<String>> {
    let src = root.join(krate);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    // A binary's `main.rs` is a crate of its own.
    let binary_root = src.join("lib.rs").exists().then(|| src.join("main.rs"));
    files.retain(|f| Some(f) != binary_root.as_ref());
    let shown = |f: &Path| {
        f.strip_prefix(root)
            .expect("in the workspace")
            .display()
            .to_string()
    };
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| (module_of(&src, f), shown(f)))
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let here = module_of(&src, file);
        let text = std::fs::read_to_string(file).expect("source is readable");
        let from = shown(file);
        let targets = edges.entry(from.clone()).or_default();
        for path in paths_named(&code_of(&text)) {
            let mut target = absolute(&here, &path);
            while !target.is_empty() && !modules.contains_key(&target) {
                target.pop();
            }
            // Its own module, or one it contains: no arrow.
            if target.starts_with(&here) {
                continue;
            }
            if let Some(to) = modules.get(&target) {
                targets.insert(to.clone());
            }
        }
    }
    edges
}

#[test]
fn no_file_imports_its_way_back_to_itself() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for krate in CRATES {
        let graph = file_graph(root, krate);
        assert!(graph.len() > 3, "{krate}: {} files read", graph.len());
        found.extend(circles(&graph));
    }
    assert!(
        found.is_empty(),
        "files that import each other around a loop: {found:#?}"
    );
}

/// The reader sees what a file imports: a circle planted in a scratch crate is found.
#[test]
fn a_planted_circle_is_found() {
    let dir = std::env::temp_dir().join(format!("fleetsim-module-graph-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).expect("scratch crate");
    let write = |name: &str, text: &str| std::fs::write(src.join(name), text).expect("write");
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    write(
        "a.rs",
        "use crate::b::{inner::Thing, Other};\n// use crate::c;\n",
    );
    write(
        "b/mod.rs",
        "pub mod inner;\npub struct Other;\nfn f() { let _ = \"crate::c\"; }\n",
    );
    write(
        "b/inner.rs",
        "pub struct Thing;\nfn g() -> super::super::a::X { todo!() }\n",
    );
    write("c.rs", "use super::a;\n");
    let graph = file_graph(&dir, "src");
    let found = circles(&graph);
    std::fs::remove_dir_all(&dir).ok();
    let name = |f: &str| format!("src/{f}");
    assert_eq!(
        found,
        vec![vec![name("a.rs"), name("b/inner.rs")]],
        "{graph:#?}"
    );
}

/// A rename is no part of the path: `base::Thing as Stand` names `base`, not a module `b`.
#[test]
fn use_trees_expand_to_their_paths_without_renames() {
    assert_eq!(
        expand_use("crate::base::Thing as Stand"),
        vec!["crate::base::Thing"]
    );
    assert_eq!(
        expand_use("crate::a::{b as c, d::{e, f as g}, *}"),
        vec![
            "crate::a::b",
            "crate::a::d::e",
            "crate::a::d::f",
            "crate::a::*"
        ]
    );
}

/// The modules `sim` re-exports from the layers below it, each with the path in the crate it
/// lives in, read off `sim/src/lib.rs`'s `pub use` items (`pub use sim_ir::{event, time};`,
/// `pub use sim_config as config;`), so a new re-export is held too.
fn reexported(lib: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for item in code_of(lib).split(';') {
        let Some(tree) = item.trim().strip_prefix("pub use ") else {
            continue;
        };
        let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
        if let Some((krate, name)) = tree.split_once(" as ") {
            found.push((name.to_string(), krate.to_string()));
        } else if let Some((krate, names)) = tree.split_once("::{") {
            for name in names.trim_end_matches('}').split(',').map(str::trim) {
                if !name.is_empty() {
                    found.push((name.to_string(), format!("{krate}::{name}")));
                }
            }
        }
    }
    found
}

/// Where code above `sim` names a lower layer's item through `sim`'s re-export
/// (`sim::time::SimTime`): each such path with the crate's own path for it.
fn reexport_paths(code: &str, reexported: &[(String, String)]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("sim::") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| is_ident(c) || c == ':') {
            continue; // `fleetsim::`, `crate::sim::`
        }
        let rest = &code[at + "sim::".len()..];
        let module: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        if let Some((_, own)) = reexported.iter().find(|(m, _)| *m == module) {
            found.push((format!("sim::{module}"), own.clone()));
        }
    }
    found
}

/// ARCHITECTURE.md, "Bird's-eye view": the crates above `sim` name each item by the crate it
/// lives in, so an import says which layer it comes from; `sim`'s re-exports serve its own
/// modules' `crate::` paths.
#[test]
fn crates_above_sim_name_lower_layers_by_their_own_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("sim/src/lib.rs")).expect("sim's lib.rs");
    let reexported = reexported(&lib);
    assert!(
        reexported.iter().any(|(m, _)| m == "time")
            && reexported.iter().any(|(m, _)| m == "config"),
        "sim's re-exports not read: {reexported:?}"
    );
    let above = [
        "src",
        "sim-engine",
        "partitioner",
        "worker",
        "coordinator",
        "tests",
        "benches",
    ];
    let mut found = Vec::new();
    for dir in above {
        let mut files = Vec::new();
        rust_files(&root.join(dir), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a source file");
            for (path, own) in reexport_paths(&code_of(&text), &reexported) {
                let shown = file.strip_prefix(root).unwrap_or(&file).display();
                found.push(format!("{shown}: {path} (write {own})"));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn a_reexport_path_is_found_and_others_are_not() {
    let lib =
        "pub mod load;\npub use sim_ir::{\n    event, time,\n};\npub use sim_config as config;\n";
    let reexported = reexported(lib);
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        reexported,
        pairs(&[
            ("event", "sim_ir::event"),
            ("time", "sim_ir::time"),
            ("config", "sim_config")
        ])
    );
    let code = code_of(
        "use sim::time::SimTime;\nuse sim::load::Experiment;\nuse fleetsim::cli;\nlet x = sim::config::Precision::Bf16;\n",
    );
    let found = reexport_paths(&code, &reexported);
    assert_eq!(
        found,
        pairs(&[("sim::time", "sim_ir::time"), ("sim::config", "sim_config")])
    );
}
