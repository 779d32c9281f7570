//! `worker/Cargo.toml` lists the workspace's lints itself, so that `src/prefetch.rs` alone may
//! allow `unsafe` (the workspace forbids it, and a forbid cannot be lifted). This keeps that
//! copy in step: the same lints at the same levels, except `unsafe_code`, denied here.

fn lints(toml_text: &str, path: &[&str]) -> toml::Table {
    let mut value: toml::Value = toml::from_str(toml_text).expect("a valid Cargo.toml");
    for key in path {
        value = value
            .get(*key)
            .unwrap_or_else(|| panic!("no [{}]", path.join(".")))
            .clone();
    }
    value.as_table().expect("a table of lints").clone()
}

#[test]
fn worker_lints_are_the_workspace_lints_with_unsafe_code_denied() {
    let mut expected = lints(include_str!("../../Cargo.toml"), &["workspace", "lints"]);
    let rust = expected
        .get_mut("rust")
        .and_then(toml::Value::as_table_mut)
        .expect("[workspace.lints.rust]");
    assert_eq!(
        rust.get("unsafe_code").and_then(toml::Value::as_str),
        Some("forbid"),
        "the workspace forbids unsafe code"
    );
    rust.insert("unsafe_code".into(), "deny".into());
    assert_eq!(
        lints(include_str!("../Cargo.toml"), &["lints"]),
        expected,
        "worker/Cargo.toml [lints] must equal the workspace's [workspace.lints] (with \
         unsafe_code = \"deny\"): copy the workspace's lints there"
    );
}
