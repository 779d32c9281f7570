//! `fleetsim validate`: a subset of the end-to-end measurement table runs within the accuracy
//! limit per row, the outputs are written, the limits fail the command when exceeded, and
//! every malformed table gets one clear error.

use std::fs;
use std::path::Path;

mod common;

use common::{assert_success, csv_table, fleetsim, one_clear_error, scratch, stdout_ok};

/// The project's copy of `../shared/calibration/e2e_iterations.csv`.
const TABLE: &str = "configs/validation/e2e_iterations.csv";

/// Each copy holds the shared table's rows, column by column, except the columns it relabels
/// or corrects with a cited source (`framework` everywhere; `settings` and `notes` of
/// e2e_frontier.csv and e2e_more.csv, whose comment lines cite each correction).
#[test]
fn the_copied_tables_match_the_shared_ones() {
    for (copy, shared, corrected) in [
        (
            TABLE,
            "../shared/calibration/e2e_iterations.csv",
            &["framework"][..],
        ),
        (
            "configs/validation/e2e_more.csv",
            "../shared/calibration/e2e_more.csv",
            &["framework", "settings", "notes"][..],
        ),
        (
            "configs/validation/e2e_frontier.csv",
            "../shared/calibration/e2e_frontier.csv",
            &["framework", "settings", "notes"][..],
        ),
    ] {
        let Ok(original) = fs::read_to_string(shared) else {
            eprintln!("skipped: {shared} is not here");
            continue;
        };
        let text = fs::read_to_string(copy).expect("read the copy");
        let (shared_header, shared_rows) = csv_table(&original);
        let (header, rows) = csv_table(&text);
        assert_eq!(rows.len(), shared_rows.len(), "{copy}");
        for (column, name) in shared_header.iter().enumerate() {
            if corrected.contains(&name.as_str()) {
                continue;
            }
            let at = header
                .iter()
                .position(|h| h == name)
                .unwrap_or_else(|| panic!("{copy} lacks {name}"));
            for (i, (row, theirs)) in rows.iter().zip(&shared_rows).enumerate() {
                assert_eq!(
                    row[at],
                    theirs[column],
                    "{copy} row {} column {name}",
                    i + 1
                );
            }
        }
        assert!(header.iter().any(|h| h == "framework"), "{copy}");
    }
}

/// The three smallest rows (8 and 64 A100s; Korthikanti et al. 2022), on the packet network:
/// each within the 12% per-row limit.
#[test]
fn small_rows_are_within_twelve_percent() {
    let out = scratch("validate-subset");
    let stdout = stdout_ok(
        fleetsim()
            .args([
                "validate",
                TABLE,
                "--rows",
                "1,2,3",
                "--max-error",
                "12",
                "--out",
            ])
            .arg(&out),
    );
    assert!(stdout.contains("MAPE"), "{stdout}");
    let csv = fs::read_to_string(out.join("validation.csv")).expect("validation.csv");
    let (_, rows) = csv_table(&csv);
    assert_eq!(rows.len(), 3, "{csv}");
    for row in &rows {
        let error: f64 = row[9].parse().expect("number");
        assert!(error.abs() <= 12.0, "{row:?}");
    }
    let svg = fs::read_to_string(out.join("parity.svg")).expect("parity.svg");
    assert!(svg.contains("<circle") && svg.contains("korthikanti2022-t5"));
    // Each row's experiment is a real file that `fleetsim check` accepts.
    let case = out.join("cases/01-korthikanti2022-t5.toml");
    assert_success(&fleetsim().arg("check").arg(&case).output().expect("check"));
    // Megatron-LM of 2022 ran an NCCL before adaptive routing (2.16): ECMP, the default.
    let text = fs::read_to_string(&case).expect("case file");
    assert!(!text.contains("routing ="), "{text}");
}

/// Rows run side by side (`--jobs`) give what they give one at a time: the same table on
/// stdout, in the table's order, and the same validation.csv, byte for byte.
#[test]
fn rows_side_by_side_match_rows_one_at_a_time() {
    let mut seen = Vec::new();
    for jobs in ["1", "3"] {
        let out = scratch(&format!("validate-jobs-{jobs}"));
        let run = fleetsim()
            .args(["validate", TABLE, "--rows", "3,1,2"])
            .args(["--set", "network.model=\"analytical\""])
            .args(["--jobs", jobs, "--out"])
            .arg(&out)
            .output()
            .expect("run fleetsim");
        let stdout = String::from_utf8_lossy(&run.stdout).replace(&*out.to_string_lossy(), "OUT");
        let csv = fs::read_to_string(out.join("validation.csv")).expect("validation.csv");
        seen.push((run.status.code(), stdout, csv));
    }
    assert_eq!(seen[0], seen[1]);
    let (_, rows) = csv_table(&seen[0].2);
    assert_eq!(rows.len(), 3, "{}", seen[0].2);
}

/// NeMo 24.03's 16K Llama2-7B row: its launcher ran FlashAttention-2 (`NVTE_FUSED_ATTN=0`),
/// and so does its case; on cuDNN it was 31% too fast.
#[test]
fn nemo_launcher_row_runs_flash_attention_2_within_five_percent() {
    let out = scratch("validate-nemo-24.03");
    let stdout = stdout_ok(
        fleetsim()
            .args([
                "validate",
                "configs/validation/e2e_more.csv",
                "--rows",
                "10",
                "--set",
                "network.model=analytical",
                "--max-error",
                "5",
                "--out",
            ])
            .arg(&out),
    );
    // Numbered as `--rows` numbers it, in the table, the CSV and the case file alike.
    assert!(stdout.contains("\n 10 nemo-24.03-longseq-h100"), "{stdout}");
    assert!(
        stdout.contains("worst: row 10 (line 11 of the file;"),
        "{stdout}"
    );
    let csv = fs::read_to_string(out.join("validation.csv")).expect("validation.csv");
    assert!(
        csv.lines().nth(1).is_some_and(|l| l.starts_with("10,11,")),
        "{csv}"
    );
    let case =
        fs::read_to_string(out.join("cases/10-nemo-24.03-longseq-h100.toml")).expect("case file");
    assert!(case.contains("attention_backend = \"flash2\""), "{case}");
    // NeMo 24.03's NCCL routes adaptively on the DGX SuperPOD's InfiniBand.
    assert!(case.contains("routing = \"adaptive\""), "{case}");
}

/// The table is printed either way; the verdict decides the exit status.
#[test]
fn limits_fail_the_command_when_exceeded() {
    for (flag, why) in [
        ("--max-mape", "above --max-mape 0.01%"),
        ("--max-error", "above --max-error 0.01%"),
    ] {
        let out = scratch("validate-limits");
        let run = fleetsim()
            .args(["validate", TABLE, "--rows", "1", flag, "0.01", "--out"])
            .arg(&out)
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{flag}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
        assert!(
            out.join("validation.csv").exists(),
            "the results are still written"
        );
    }
}

/// A limit that is not a percentage (NaN passes every comparison) is a usage error, on one
/// line; the help names a table that exists.
#[test]
fn a_limit_that_is_not_a_percentage_is_refused_and_the_help_names_a_real_table() {
    for bad in ["nan", "-1", "inf", "five"] {
        let out = fleetsim()
            .args(["validate", TABLE, &format!("--max-mape={bad}")])
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!("`{bad}` is not a percentage")),
            "{stderr}"
        );
    }
    let help = stdout_ok(fleetsim().args(["validate", "--help"]));
    let named = help
        .split_whitespace()
        .find(|w| w.ends_with(".csv):") || w.ends_with(".csv"))
        .map(|w| w.trim_end_matches("):").trim_end_matches(')'))
        .expect("the help names a table");
    assert!(std::path::Path::new(named).exists(), "{named}: {help}");
}

#[test]
fn a_row_number_past_the_table_is_refused() {
    let stderr = one_clear_error(
        fleetsim().args(["validate", TABLE, "--rows", "99"]),
        "--rows 99",
    );
    assert!(stderr.contains("the table has rows 1 to 18"), "{stderr}");
}

#[test]
fn every_bad_table_fails_with_one_clear_line() {
    let dir = Path::new("tests/fixtures/bad-validate");
    let mut fixtures: Vec<_> = fs::read_dir(dir)
        .expect("fixtures")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    fixtures.sort();
    assert!(fixtures.len() >= 12, "{fixtures:?}");
    let out = scratch("validate-bad");
    for path in fixtures {
        let text = fs::read_to_string(&path).expect("read");
        let want = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .expect("`# expect:` first line")
            .to_string();
        let name = path.display().to_string();
        let stderr = one_clear_error(
            fleetsim().arg("validate").arg(&path).arg("--out").arg(&out),
            &name,
        );
        assert!(stderr.contains(&name), "{name}: {stderr}");
        assert!(
            stderr.contains(&want),
            "{name}: expected `{want}` in {stderr}"
        );
    }
    let stderr = one_clear_error(
        fleetsim().args(["validate", "tests/fixtures/bad-validate/absent.csv"]),
        "absent",
    );
    assert!(stderr.contains("cannot be read"), "{stderr}");
}

/// A row that cannot be built is that row's failure, with its reason: the other rows run,
/// `validation.csv` holds both, and the command ends with one line naming the failed row.
#[test]
fn a_row_that_cannot_be_built_fails_alone() {
    let out = scratch("validate-one-row-fails");
    let table = "tests/fixtures/validate/one-row-cannot-be-built.csv";
    let run = fleetsim()
        .args(["validate", table, "--out"])
        .arg(&out)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("1 of 2 row(s) could not be run") && stderr.contains("line 7"),
        "{stderr}"
    );
    assert!(stdout.contains("failed (line 7)"), "{stdout}");
    assert!(
        stdout.contains("MAPE") && stdout.contains("over 1 row(s)"),
        "{stdout}"
    );
    let csv = fs::read_to_string(out.join("validation.csv")).expect("validation.csv");
    let (header, rows) = csv_table(&csv);
    assert_eq!(rows.len(), 2, "{csv}");
    let failure = header
        .iter()
        .position(|h| h == "failure")
        .expect("failure column");
    assert!(rows[0][failure].is_empty(), "{csv}");
    assert!(rows[1][failure].contains("CP 3"), "{csv}");
}

/// A row whose framework release is not in the table, or that names none, fails alone,
/// naming the releases there; the other rows run, and no case file is written for it.
#[test]
fn a_row_with_an_unknown_or_empty_framework_fails_alone() {
    for (table, framework, why) in [
        (
            "tests/fixtures/validate/unknown-framework-fails-its-row.csv",
            "deepspeed-0.14",
            "unknown `deepspeed-0.14`",
        ),
        (
            "tests/fixtures/validate/empty-framework-fails-its-row.csv",
            "",
            "empty; name the framework release",
        ),
    ] {
        let out = scratch("validate-unknown-framework");
        let run = fleetsim()
            .args(["validate", table, "--out"])
            .arg(&out)
            .output()
            .expect("run");
        let stdout = String::from_utf8_lossy(&run.stdout);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("1 of 2 row(s) could not be run")
                && stderr.contains("line 6")
                && stderr.contains(why)
                && stderr.contains("megatron-lm-2022, megatron-core-0.8"),
            "{stderr}"
        );
        assert!(
            stdout.contains("failed (line 6): column `framework`"),
            "{stdout}"
        );
        assert!(stdout.contains("over 1 row(s)"), "{stdout}");
        let csv = fs::read_to_string(out.join("validation.csv")).expect("validation.csv");
        let (header, rows) = csv_table(&csv);
        let column = |name: &str| header.iter().position(|h| h == name).expect(name);
        assert_eq!(rows[1][column("framework")], framework, "{csv}");
        assert!(rows[1][column("case")].is_empty(), "{csv}");
        assert!(!out.join("cases/02-korthikanti2022-t5.toml").exists());
    }
}

/// A release the framework table does not list, of a family it has, is not refused: the row
/// runs with the family's nearest earlier release, and the printed result, validation.csv and
/// the case file say which, and how to state the release's own facts.
#[test]
fn an_unlisted_release_runs_with_its_familys_nearest_earlier_one() {
    let out = scratch("validate-unlisted-release");
    let run = fleetsim()
        .args([
            "validate",
            "tests/fixtures/validate/unlisted-release-runs-as-its-family.csv",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let note = "row 1 (line 6): framework `megatron-lm-2023` is not in configs/frameworks.toml: \
                the row ran with the launch facts of `megatron-lm-2022`";
    assert!(stdout.contains(note), "{stdout}");
    assert!(stdout.contains("--frameworks"), "{stdout}");
    let csv = fs::read_to_string(out.join("validation.csv")).expect("validation.csv");
    let (header, rows) = csv_table(&csv);
    let column = |name: &str| header.iter().position(|h| h == name).expect(name);
    assert_eq!(rows[0][column("framework")], "megatron-lm-2023", "{csv}");
    assert_eq!(
        rows[0][column("framework_facts")],
        "megatron-lm-2022",
        "{csv}"
    );
    assert!(rows[0][column("failure")].is_empty(), "{csv}");
    let case = fs::read_to_string(out.join("cases/01-korthikanti2022-t5.toml")).expect("case");
    assert!(
        case.contains("framework `megatron-lm-2023` is not in configs/frameworks.toml")
            && case.contains("# Framework megatron-lm-2022:"),
        "{case}"
    );
}

/// `--frameworks FILE` reads a table of one's own; a malformed one is one line naming the
/// file, line and key (tests/fixtures/bad-frameworks/, whose first lines say what).
#[test]
fn a_bad_framework_table_fails_with_one_clear_line() {
    let dir = Path::new("tests/fixtures/bad-frameworks");
    let mut seen = 0;
    for entry in fs::read_dir(dir).expect("fixtures") {
        let path = entry.expect("entry").path();
        let text = fs::read_to_string(&path).expect("read");
        let want = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .expect("`# expect:` first line");
        let name = path.display().to_string();
        let stderr = one_clear_error(
            fleetsim()
                .args(["validate", TABLE, "--rows", "1", "--frameworks"])
                .arg(&path),
            &name,
        );
        assert!(stderr.contains(&format!("{name}:")), "{name}: {stderr}");
        assert!(
            stderr.contains(want),
            "{name}: expected `{want}` in {stderr}"
        );
        seen += 1;
    }
    assert!(seen >= 6, "{seen}");
}
