//! Typed changes to an experiment: what `--set`, `--vary`, a plan candidate, a `validate` row
//! or `fleetsim collective` change in the file's tree, each with its origin. Text is parsed
//! once, where a person typed it (the command line); every other caller gives typed values.

use super::ConfigError;
use super::source::{Located, Origin, Value, relocate, set_value};

/// One change: a dotted key (`parallel.tp`, `gpu_mix[1].count`) and its value, whose origin
/// says who asked for it.
#[derive(Debug, Clone)]
struct Override {
    key: String,
    path: Vec<String>,
    value: Located,
}

/// Changes applied in order on top of an experiment file: a later one wins over an earlier
/// one for the same key.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    entries: Vec<Override>,
}

impl Overrides {
    /// No change: the file as written.
    pub fn none() -> Self {
        Self::default()
    }

    /// `--set KEY=VALUE` texts, as the command line gives them.
    pub fn from_sets(sets: &[String]) -> Result<Self, ConfigError> {
        Self::from_assignments(sets, &Origin::CommandLine)
    }

    /// `KEY=VALUE` texts typed by a person, with the flag they came from (`--set`, `--vary`).
    /// A value is read as TOML when it parses (numbers, booleans, arrays, quoted strings) and
    /// as a bare string otherwise.
    pub fn from_assignments(assignments: &[String], origin: &Origin) -> Result<Self, ConfigError> {
        let mut overrides = Self::none();
        for assignment in assignments {
            let Some((key, raw)) = assignment.split_once('=') else {
                return Err(ConfigError::new(
                    origin.clone(),
                    assignment,
                    "expected KEY=VALUE, e.g. --set parallel.tp=4",
                ));
            };
            overrides.push(key, relocate(set_value(raw), origin))?;
        }
        Ok(overrides)
    }

    /// Sets `key`, a dotted key written in the code, to a typed value on behalf of `origin`.
    pub fn set(
        &mut self,
        key: &'static str,
        value: impl Into<Value>,
        origin: &Origin,
    ) -> &mut Self {
        let value = Located {
            value: value.into(),
            origin: origin.clone(),
        };
        self.entries.push(Override {
            key: key.to_string(),
            path: key.split('.').map(str::to_string).collect(),
            value: relocate(value, origin),
        });
        self
    }

    /// The changes as `--set` arguments a person can paste (`parallel.tp=4`).
    pub fn to_assignments(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| format!("{}={}", e.key, e.value.to_toml()))
            .collect()
    }

    fn push(&mut self, key: &str, value: Located) -> Result<(), ConfigError> {
        let key = key.trim();
        let path: Vec<String> = key.split('.').map(|s| s.trim().to_string()).collect();
        if path.iter().any(String::is_empty) {
            return Err(ConfigError::new(
                value.origin,
                key,
                "expected a dotted key such as cluster.nic_gbps",
            ));
        }
        self.entries.push(Override {
            key: key.to_string(),
            path,
            value,
        });
        Ok(())
    }

    /// These changes, then `later`'s (which win where both set a key).
    pub fn then(mut self, later: &Overrides) -> Self {
        self.entries.extend(later.entries.iter().cloned());
        self
    }

    /// Writes every change into an experiment's located tree, in order.
    pub fn apply(&self, tree: &mut Located) -> Result<(), ConfigError> {
        for entry in &self.entries {
            tree.set(&entry.path, entry.value.clone()).map_err(|e| {
                ConfigError::new(entry.value.origin.clone(), &entry.key, e.to_string())
            })?;
        }
        Ok(())
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Boolean(v)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Integer(v)
    }
}

impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Integer(i64::from(v))
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::String(v.to_string())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::String(v)
    }
}

impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(items: Vec<T>) -> Self {
        Value::Array(
            items
                .into_iter()
                .map(|item| Located {
                    value: item.into(),
                    origin: Origin::Derived(String::new()),
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PathSegment, parse_path, parse_text};

    fn tree() -> Located {
        parse_text("e.toml", "[parallel]\ntp = 2\n[[gpu_mix]]\ncount = 4\n").expect("toml")
    }

    fn integer(tree: &Located, key: &str) -> (i64, Origin) {
        let path: Vec<PathSegment> = parse_path(key);
        let v = tree.lookup(&path).expect("key present");
        match v.value {
            Value::Integer(n) => (n, v.origin.clone()),
            ref other => panic!("{key} is {other:?}"),
        }
    }

    #[test]
    fn a_typed_value_lands_with_its_origin_and_the_later_change_wins() {
        let candidate = Origin::Derived("plan candidate".into());
        let mut candidate_layout = Overrides::none();
        candidate_layout.set("parallel.tp", 4u32, &candidate);
        let overrides = Overrides::from_sets(&["parallel.tp=8".into()])
            .expect("set")
            .then(&candidate_layout);
        let mut t = tree();
        overrides.apply(&mut t).expect("apply");
        assert_eq!(integer(&t, "parallel.tp"), (4, candidate));
    }

    #[test]
    fn text_is_read_as_toml_where_it_parses_and_an_array_of_tables_is_indexed() {
        let mut t = tree();
        Overrides::from_sets(&["gpu_mix[0].count=6".into(), "name=my run".into()])
            .expect("sets")
            .apply(&mut t)
            .expect("apply");
        assert_eq!(integer(&t, "gpu_mix[0].count"), (6, Origin::CommandLine));
        let name = t.lookup(&parse_path("name")).expect("name");
        assert!(matches!(&name.value, Value::String(s) if s == "my run"));
    }

    #[test]
    fn typed_changes_print_as_the_sets_a_person_would_paste() {
        let origin = Origin::Derived("plan".into());
        let mut o = Overrides::none();
        o.set("parallel.order", "tp-dp-pp", &origin).set(
            "parallel.stage_layers",
            vec![3u32, 5],
            &origin,
        );
        assert_eq!(
            o.to_assignments(),
            [
                "parallel.order=\"tp-dp-pp\"",
                "parallel.stage_layers=[3, 5]"
            ]
        );
        let mut t = tree();
        Overrides::from_sets(&o.to_assignments())
            .expect("the printed sets read back")
            .apply(&mut t)
            .expect("apply");
        assert!(matches!(
            &t.lookup(&parse_path("parallel.stage_layers")).expect("set").value,
            Value::Array(a) if a.len() == 2
        ));
    }

    #[test]
    fn a_malformed_assignment_names_the_flag_and_how_to_write_it() {
        let e =
            Overrides::from_assignments(&["parallel.tp".into()], &Origin::Vary).expect_err("no =");
        assert_eq!(e.origin, Origin::Vary);
        assert!(e.message.contains("KEY=VALUE"), "{e}");
        let e = Overrides::from_sets(&["parallel..tp=2".into()]).expect_err("empty segment");
        assert!(e.message.contains("dotted key"), "{e}");
    }
}
