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
    let workspace = include_str!("../../Cargo.toml");
    let worker = include_str!("../Cargo.toml");
    let groups = lints(workspace, &["workspace", "lints"]);
    assert_eq!(
        lints(worker, &["lints"]).keys().collect::<Vec<_>>(),
        groups.keys().collect::<Vec<_>>(),
        "worker/Cargo.toml has the workspace's lint groups"
    );
    for group in groups.keys().map(String::as_str) {
        let mut expected = lints(workspace, &["workspace", "lints", group]);
        let actual = lints(worker, &["lints", group]);
        if group == "rust" {
            assert_eq!(
                expected.get("unsafe_code").and_then(toml::Value::as_str),
                Some("forbid"),
                "the workspace forbids unsafe code"
            );
            expected.insert("unsafe_code".into(), "deny".into());
        }
        assert_eq!(
            actual, expected,
            "worker/Cargo.toml [lints.{group}] must equal the workspace's [workspace.lints.{group}] \
             (with unsafe_code = \"deny\"): copy the workspace's lints there"
        );
    }
}
