//! Reading experiment files: TOML with `include`, `--set` overrides and presets, where every
//! value remembers the file and line it came from so that errors can point at it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue};

use super::ConfigError;

/// Where a value was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    File {
        file: String,
        line: u32,
    },
    /// A whole file, when no single line is to blame (missing file, empty file).
    WholeFile(String),
    /// A `--set KEY=VALUE` on the command line.
    CommandLine,
    /// A value of `fleetsim sweep --vary KEY=V1,V2`.
    Vary,
    /// Filled in by the loader (a preset, a Hugging Face config, a default).
    Derived(String),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { file, line } => write!(f, "{file}:{line}"),
            Origin::WholeFile(file) => write!(f, "{file}"),
            Origin::CommandLine => write!(f, "--set"),
            Origin::Vary => write!(f, "--vary"),
            Origin::Derived(what) => write!(f, "{what}"),
        }
    }
}

/// A TOML value whose every part knows its origin.
#[derive(Debug, Clone)]
pub struct Located {
    pub value: Value,
    pub origin: Origin,
}

#[derive(Debug, Clone)]
pub enum Value {
    Table(BTreeMap<String, Located>),
    Array(Vec<Located>),
    String(String),
    Integer(i64),
    Float(f64),
    Boolean(bool),
}

impl Located {
    pub fn table(origin: Origin) -> Self {
        Located {
            value: Value::Table(BTreeMap::new()),
            origin,
        }
    }

    pub fn as_table(&self) -> Option<&BTreeMap<String, Located>> {
        match &self.value {
            Value::Table(t) => Some(t),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// Follows a dotted path (`cluster.gpu_mix[1].hosts` split into segments).
    pub fn lookup(&self, path: &[PathSegment]) -> Option<&Located> {
        let mut here = self;
        for seg in path {
            here = match (seg, &here.value) {
                (PathSegment::Key(k), Value::Table(t)) => t.get(k)?,
                (PathSegment::Index(i), Value::Array(a)) => a.get(*i)?,
                _ => return None,
            };
        }
        Some(here)
    }

    /// The origin of the deepest existing value along `path`.
    pub fn origin_of(&self, path: &[PathSegment]) -> Origin {
        let mut here = self;
        for seg in path {
            let next = match (seg, &here.value) {
                (PathSegment::Key(k), Value::Table(t)) => t.get(k),
                (PathSegment::Index(i), Value::Array(a)) => a.get(*i),
                _ => None,
            };
            match next {
                Some(n) => here = n,
                None => break,
            }
        }
        here.origin.clone()
    }

    /// Removes and returns a key of a table.
    pub fn remove(&mut self, key: &str) -> Option<Located> {
        match &mut self.value {
            Value::Table(t) => t.remove(key),
            _ => None,
        }
    }

    /// Deep merge: tables merge key by key, anything else in `over` replaces `self`.
    pub fn merge(&mut self, over: Located) {
        match (&mut self.value, over.value) {
            (Value::Table(base), Value::Table(top)) => {
                for (k, v) in top {
                    match base.get_mut(&k) {
                        Some(existing) => existing.merge(v),
                        None => {
                            base.insert(k, v);
                        }
                    }
                }
            }
            (_, value) => {
                self.value = value;
                self.origin = over.origin;
            }
        }
    }

    /// Sets `path` to `value`, creating tables on the way. A key may index an array of
    /// tables that exists, e.g. `gpu_mix[1]` (0-based).
    pub fn set(&mut self, path: &[String], value: Located) -> Result<(), SetError> {
        let Some((last, parents)) = path.split_last() else {
            return Err(SetError::EmptyKey);
        };
        let mut here = self;
        for (depth, key) in parents.iter().enumerate() {
            let (name, index) = split_index(key)?;
            let Value::Table(t) = &mut here.value else {
                return Err(SetError::NotATable {
                    key: parents[..depth].join("."),
                });
            };
            here = match index {
                None => t
                    .entry(name.to_string())
                    .or_insert_with(|| Located::table(value.origin.clone())),
                Some(i) => element(t.get_mut(name), name, i)?,
            };
        }
        let (name, index) = split_index(last)?;
        let Value::Table(t) = &mut here.value else {
            return Err(SetError::NotATable {
                key: parents.join("."),
            });
        };
        match (index, t.get_mut(name)) {
            (Some(i), existing) => *element(existing, name, i)? = value,
            (None, Some(existing)) => existing.merge(value),
            (None, None) => {
                t.insert(name.to_string(), value);
            }
        }
        Ok(())
    }

    /// Plain TOML value for serde, without origins.
    pub fn to_toml(&self) -> toml::Value {
        match &self.value {
            Value::Table(t) => {
                toml::Value::Table(t.iter().map(|(k, v)| (k.clone(), v.to_toml())).collect())
            }
            Value::Array(a) => toml::Value::Array(a.iter().map(Located::to_toml).collect()),
            Value::String(s) => toml::Value::String(s.clone()),
            Value::Integer(i) => toml::Value::Integer(*i),
            Value::Float(x) => toml::Value::Float(*x),
            Value::Boolean(b) => toml::Value::Boolean(*b),
        }
    }
}

/// Why [`Located::set`] cannot set a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetError {
    #[error("empty key")]
    EmptyKey,
    #[error("`{key}` is not a table")]
    NotATable { key: String },
    #[error("`{key}` is not NAME[INDEX] with a number, e.g. gpu_mix[0]")]
    NotAnIndex { key: String },
    #[error("`{name}` has {len} element(s); index {index} is past its end")]
    PastTheEnd {
        name: String,
        len: usize,
        index: usize,
    },
    #[error("`{name}` is not an array")]
    NotAnArray { name: String },
    #[error("there is no `{name}` to index")]
    NothingToIndex { name: String },
}

/// `name[3]` → (`name`, Some(3)); `name` → (`name`, None).
fn split_index(key: &str) -> Result<(&str, Option<usize>), SetError> {
    let Some((name, rest)) = key.split_once('[') else {
        return Ok((key, None));
    };
    rest.strip_suffix(']')
        .and_then(|i| i.parse().ok())
        .map(|i| (name, Some(i)))
        .ok_or_else(|| SetError::NotAnIndex { key: key.into() })
}

/// Element `i` of the array `name`, which must exist.
fn element<'a>(
    array: Option<&'a mut Located>,
    name: &str,
    i: usize,
) -> Result<&'a mut Located, SetError> {
    match array.map(|a| &mut a.value) {
        Some(Value::Array(items)) => {
            let len = items.len();
            items.get_mut(i).ok_or_else(|| SetError::PastTheEnd {
                name: name.into(),
                len,
                index: i,
            })
        }
        Some(_) => Err(SetError::NotAnArray { name: name.into() }),
        None => Err(SetError::NothingToIndex { name: name.into() }),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSegment {
    Key(String),
    Index(usize),
}

/// Splits serde_path_to_error's rendering (`a.b[2].c`) into segments.
pub fn parse_path(path: &str) -> Vec<PathSegment> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let mut rest = part;
        if let Some(open) = rest.find('[') {
            if open > 0 {
                out.push(PathSegment::Key(rest[..open].to_string()));
            }
            rest = &rest[open..];
            while let Some(stripped) = rest.strip_prefix('[') {
                let Some(close) = stripped.find(']') else {
                    break;
                };
                if let Ok(i) = stripped[..close].parse() {
                    out.push(PathSegment::Index(i));
                }
                rest = &stripped[close + 1..];
            }
        } else if !rest.is_empty() && rest != "?" {
            out.push(PathSegment::Key(rest.to_string()));
        }
    }
    out
}

/// Line numbers of byte offsets in one text.
struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { starts }
    }

    fn line(&self, offset: usize) -> u32 {
        let idx = self.starts.partition_point(|&s| s <= offset);
        u32::try_from(idx.max(1)).unwrap_or(u32::MAX)
    }
}

/// Parses TOML text into a located tree.
pub fn parse_text(file: &str, text: &str) -> Result<Located, ConfigError> {
    if text.contains('\0') {
        return Err(ConfigError::at_file(
            file,
            "is binary, not a TOML text file (it contains NUL bytes)",
        ));
    }
    let lines = LineIndex::new(text);
    let doc = DeTable::parse(text).map_err(|e| {
        let line = e.span().map(|s| lines.line(s.start)).unwrap_or(1);
        let mut message = e.message().trim().replace('\n', " ");
        // toml says only "duplicate key"; its span is the key written the second time.
        if message == "duplicate key"
            && let Some(key) = e.span().and_then(|s| text.get(s)).map(str::trim)
        {
            message =
                format!("duplicate key `{key}`: a key is set once per table; keep one of the two");
        }
        ConfigError::new(
            Origin::File {
                file: file.to_string(),
                line,
            },
            "",
            format!("invalid TOML: {message}"),
        )
    })?;
    let origin = Origin::File {
        file: file.to_string(),
        line: 1,
    };
    let mut table = BTreeMap::new();
    for (k, v) in doc.get_ref() {
        table.insert(
            k.get_ref().to_string(),
            convert(file, &lines, (k.get_ref(), k.span().start), v)?,
        );
    }
    Ok(Located {
        value: Value::Table(table),
        origin,
    })
}

/// A TOML value with its origin; `key` is its dotted path (for errors) and where its key
/// was written.
fn convert(
    file: &str,
    lines: &LineIndex,
    (key, key_offset): (&str, usize),
    value: &toml::Spanned<DeValue<'_>>,
) -> Result<Located, ConfigError> {
    // A table header's span covers the whole table; the key's line is the one users look for.
    let line = lines.line(key_offset.min(value.span().start));
    let origin = Origin::File {
        file: file.to_string(),
        line,
    };
    let v = match value.get_ref() {
        DeValue::String(s) => Value::String(s.to_string()),
        DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
            Ok(n) => Value::Integer(n),
            Err(_) => {
                return Err(ConfigError::new(
                    origin,
                    key,
                    format!("integer {} does not fit in 64 bits", i.as_str()),
                ));
            }
        },
        DeValue::Float(x) => {
            let parsed: f64 = x.as_str().replace('_', "").parse().map_err(|_| {
                ConfigError::new(origin.clone(), key, format!("bad float {}", x.as_str()))
            })?;
            if !parsed.is_finite() {
                return Err(ConfigError::new(
                    origin,
                    key,
                    format!(
                        "{} is not a finite number; write a number such as 400.0",
                        x.as_str()
                    ),
                ));
            }
            Value::Float(parsed)
        }
        DeValue::Boolean(b) => Value::Boolean(*b),
        DeValue::Datetime(d) => {
            return Err(ConfigError::new(
                origin,
                key,
                format!("date-time {d} is not a valid value anywhere in an experiment file"),
            ));
        }
        DeValue::Array(a) => Value::Array(
            a.iter()
                .enumerate()
                .map(|(i, item)| {
                    convert(
                        file,
                        lines,
                        (&format!("{key}[{i}]"), item.span().start),
                        item,
                    )
                })
                .collect::<Result<_, _>>()?,
        ),
        DeValue::Table(t) => {
            let mut out = BTreeMap::new();
            for (k, v) in t {
                let path = format!("{key}.{}", k.get_ref());
                out.insert(
                    k.get_ref().to_string(),
                    convert(file, lines, (&path, k.span().start), v)?,
                );
            }
            Value::Table(out)
        }
    };
    Ok(Located { value: v, origin })
}

/// The most bytes an experiment file, or a file it includes, may have: 16 MiB, thousands of
/// times the largest in configs/. Reading stops there, so a path such as `/dev/zero` is one
/// clear error rather than a read without end.
pub const MAX_EXPERIMENT_BYTES: u64 = 16 << 20;

/// Reads a file and resolves its `include`s: included files first, in order, then the file's own
/// keys on top ("later keys win"). Paths are relative to the including file.
pub fn load_with_includes(path: &Path, chain: &mut Vec<PathBuf>) -> Result<Located, ConfigError> {
    use std::io::Read as _;
    let shown = path.display().to_string();
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_EXPERIMENT_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| {
            let what = match e.kind() {
                std::io::ErrorKind::NotFound => "does not exist".to_string(),
                _ => format!("cannot be read: {e}"),
            };
            ConfigError::at_file(&shown, what)
        })?;
    if bytes.len() as u64 > MAX_EXPERIMENT_BYTES {
        return Err(ConfigError::at_file(
            &shown,
            format!(
                "is larger than {} MiB; an experiment file (or a file it includes) is a short TOML text: is this the right file?",
                MAX_EXPERIMENT_BYTES >> 20
            ),
        ));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        ConfigError::at_file(
            &shown,
            format!(
                "is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })?;
    load_text_with_includes(path, &text, chain)
}

/// [`load_with_includes`] for the text of `path`, already read: errors name `path`, and its
/// `include`s are read relative to its folder.
pub fn load_text_with_includes(
    path: &Path,
    text: &str,
    chain: &mut Vec<PathBuf>,
) -> Result<Located, ConfigError> {
    let shown = path.display().to_string();
    if text.trim().is_empty() {
        return Err(ConfigError::at_file(
            &shown,
            "is empty; an experiment needs at least `name`, [cluster] and [model]",
        ));
    }
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    chain.push(canonical);
    let mut own = parse_text(&shown, text)?;
    let mut merged = Located::table(own.origin.clone());
    if let Some(include) = own.remove("include") {
        let items: Vec<Located> = match include.value {
            Value::String(_) => vec![include],
            Value::Array(items) => items,
            _ => {
                return Err(ConfigError::new(
                    include.origin,
                    "include",
                    "expected a list of file paths, e.g. include = [\"../models/gpt3-175b.toml\"]",
                ));
            }
        };
        let base = path.parent().unwrap_or(Path::new("."));
        for item in items {
            let Some(rel) = item.as_str() else {
                return Err(ConfigError::new(
                    item.origin,
                    "include",
                    "expected a file path string",
                ));
            };
            let target = base.join(rel);
            let canonical = target.canonicalize().map_err(|_| {
                ConfigError::new(
                    item.origin.clone(),
                    "include",
                    format!(
                        "included file {} does not exist (paths are relative to the including file)",
                        target.display()
                    ),
                )
            })?;
            if let Some(pos) = chain.iter().position(|p| *p == canonical) {
                let cycle: Vec<String> = chain[pos..]
                    .iter()
                    .chain(std::iter::once(&canonical))
                    .map(|p| {
                        p.file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default()
                    })
                    .collect();
                return Err(ConfigError::new(
                    item.origin.clone(),
                    "include",
                    format!("include cycle: {}", cycle.join(" -> ")),
                ));
            }
            let included = load_with_includes(&target, chain)?;
            merged.merge(included);
        }
    }
    chain.pop();
    merged.merge(own);
    Ok(merged)
}

/// Applies one `--set dotted.key=value` (the value as [`set_value`] reads it).
#[cfg(test)]
fn apply_set(root: &mut Located, assignment: &str) -> Result<(), ConfigError> {
    super::Overrides::from_sets(&[assignment.to_string()])?.apply(root)
}

/// The value of a `--set` (or of a `validate` row's `settings`): read as TOML when it parses
/// (numbers, booleans, arrays, quoted strings) and as a bare string otherwise.
pub fn set_value(raw: &str) -> Located {
    let raw = raw.trim();
    let parsed = parse_text("--set", &format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"));
    match parsed {
        Some(v) => relocate(v, &Origin::CommandLine),
        None => Located {
            value: Value::String(raw.to_string()),
            origin: Origin::CommandLine,
        },
    }
}

/// Re-labels every part of a value with one origin.
pub fn relocate(mut v: Located, origin: &Origin) -> Located {
    v.origin = origin.clone();
    v.value = match v.value {
        Value::Table(t) => Value::Table(
            t.into_iter()
                .map(|(k, x)| (k, relocate(x, origin)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(|x| relocate(x, origin)).collect()),
        other => other,
    };
    v
}

/// Deserializes a located tree into a typed config; errors point at the offending key.
pub fn deserialize<T: DeserializeOwned>(root: &Located) -> Result<T, ConfigError> {
    let value = root.to_toml();
    let result: Result<T, serde_path_to_error::Error<toml::de::Error>> =
        serde_path_to_error::deserialize(value);
    result.map_err(|err| {
        let rendered = err.path().to_string();
        let path = parse_path(&rendered);
        let origin = root.origin_of(&path);
        let message = err.inner().message().trim().replace('\n', " ");
        let key = if rendered == "." {
            String::new()
        } else {
            rendered
        };
        let written = root.lookup(&path).map(|v| toml_kind(&v.value));
        // A name written as something else (a number for `network.model`): serde says
        // "unit variant"; the names it takes are what the user needs.
        let message = match written {
            Some(kind) if message.contains("unit variant") || message.contains("string only") => {
                match names_at::<T>(root, &path) {
                    Some(names) => format!("wrong type: got {kind}; expected one of {names}"),
                    None => format!("wrong type: got {kind}; expected a name in quotes"),
                }
            }
            Some(kind) if message.contains("did not match any variant of untagged enum") => {
                let wanted = message
                    .rsplit(' ')
                    .next()
                    .and_then(untagged_wanted)
                    .unwrap_or("a value of another type");
                format!("wrong type: got {kind}; expected {wanted}")
            }
            _ => describe_serde_message(&message),
        };
        ConfigError::new(origin, &key, message)
    })
}

/// A TOML value's type as a user writes it.
fn toml_kind(value: &Value) -> &'static str {
    match value {
        Value::Table(_) => "a table",
        Value::Array(_) => "an array",
        Value::String(_) => "a string",
        Value::Integer(_) => "a whole number",
        Value::Float(_) => "a number",
        Value::Boolean(_) => "true or false",
    }
}

/// What each untagged enum of the experiment file takes, in words (serde only names it).
fn untagged_wanted(rust_name: &str) -> Option<&'static str> {
    match rust_name {
        "JobHosts" => {
            Some("a list of host indices, e.g. [0, 1], or a Slurm host list, e.g. \"host[0-3]\"")
        }
        _ => None,
    }
}

/// The names the enum at `path` takes: the tree deserialized again with a string there
/// that no enum takes, whose error lists them.
fn names_at<T: DeserializeOwned>(root: &Located, path: &[PathSegment]) -> Option<String> {
    let mut value = root.to_toml();
    let mut here = &mut value;
    for seg in path {
        here = match (seg, here) {
            (PathSegment::Key(k), toml::Value::Table(t)) => t.get_mut(k)?,
            (PathSegment::Index(i), toml::Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    *here = toml::Value::String("\u{1}".into());
    let err = serde_path_to_error::deserialize::<_, T>(value).err()?;
    let message = err.inner().message().replace('\n', " ");
    let names = message.split("expected one of ").nth(1)?;
    Some(names.trim().to_string())
}

/// Turns serde's wording into the one users of this tool see.
fn describe_serde_message(message: &str) -> String {
    let m = message.replace("invalid type: ", "wrong type: got ");
    let m = m.replace("unknown field", "unknown key");
    let m = m.replace("missing field", "missing required key");
    let m = m.replace("unknown variant", "unknown value");
    let m = m.replace(", expected", "; expected");
    // serde's data model in TOML's words.
    let m = m.replace("got sequence", "got an array");
    let m = m.replace("expected a sequence", "expected an array");
    let m = m.replace("got map", "got a table");
    let m = m.replace("expected a map", "expected a table");
    let m = m.replace("floating point", "number");
    // `expected struct LatencyConfig` (`with 8 elements` after an array's length).
    let m = match m.find("expected struct ") {
        Some(at) => {
            let head = &m[..at];
            let head = match head.find("invalid length") {
                Some(0) => "wrong type: got an array; ".to_string(),
                _ => head.to_string(),
            };
            format!("{head}expected a table")
        }
        None => m,
    };
    // Rust's type names mean nothing to a user: say what to write.
    for (rust, wanted) in [
        ("u8", "a whole number from 0 to 255"),
        ("u16", "a whole number from 0 to 65535"),
        ("u32", "a whole number from 0 to 4294967295"),
        ("u64", "a whole number of 0 or more"),
        ("usize", "a whole number of 0 or more"),
        ("i32", "a whole number"),
        ("i64", "a whole number"),
        ("f32", "a number"),
        ("f64", "a number"),
    ] {
        if let Some(head) = m.strip_suffix(&format!("; expected {rust}")) {
            return format!("{head}; expected {wanted}");
        }
    }
    m
}

/// Parses one self-contained TOML document (a GPU file, a preset) into a typed value.
pub fn parse_typed<T: DeserializeOwned>(file: &str, text: &str) -> Result<T, ConfigError> {
    let tree = parse_text(file, text)?;
    deserialize(&tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reading stops past [`MAX_EXPERIMENT_BYTES`]: a file without end is one error.
    #[cfg(unix)]
    #[test]
    fn a_file_without_end_is_refused_after_16_mib() {
        let e = load_with_includes(Path::new("/dev/zero"), &mut Vec::new()).expect_err("zeros");
        assert_eq!(
            e.to_string(),
            "/dev/zero: file is larger than 16 MiB; an experiment file (or a file it includes) is a short TOML text: is this the right file?"
        );
    }

    #[test]
    fn path_rendering_round_trips() {
        assert_eq!(
            parse_path("cluster.gpu_mix[1].hosts"),
            vec![
                PathSegment::Key("cluster".into()),
                PathSegment::Key("gpu_mix".into()),
                PathSegment::Index(1),
                PathSegment::Key("hosts".into())
            ]
        );
    }

    #[test]
    fn values_know_their_line() {
        let t = parse_text("x.toml", "name = \"a\"\n\n[parallel]\ntp = 4\n").unwrap();
        let tp = t
            .lookup(&[
                PathSegment::Key("parallel".into()),
                PathSegment::Key("tp".into()),
            ])
            .unwrap();
        assert_eq!(
            tp.origin,
            Origin::File {
                file: "x.toml".into(),
                line: 4
            }
        );
    }

    #[test]
    fn set_parses_toml_values_and_falls_back_to_strings() {
        let mut t = parse_text("x.toml", "[cluster]\ngpu = \"A\"\n").unwrap();
        apply_set(&mut t, "cluster.gpu=H100-SXM").unwrap();
        apply_set(&mut t, "parallel.tp=4").unwrap();
        let v = t.to_toml();
        assert_eq!(v["cluster"]["gpu"].as_str(), Some("H100-SXM"));
        assert_eq!(v["parallel"]["tp"].as_integer(), Some(4));
    }

    #[test]
    fn set_indexes_arrays_of_tables() {
        let text = "[[mix]]\ngpu = \"A\"\n[[mix]]\ngpu = \"B\"\n";
        let mut t = parse_text("x.toml", text).expect("parses");
        apply_set(&mut t, "mix[1].gpu=C").expect("sets");
        let v = t.to_toml();
        assert_eq!(v["mix"][0]["gpu"].as_str(), Some("A"));
        assert_eq!(v["mix"][1]["gpu"].as_str(), Some("C"));
        for (bad, why) in [
            ("mix[2].gpu=C", "past its end"),
            ("mix[a].gpu=C", "NAME[INDEX]"),
            ("other[0].gpu=C", "no `other`"),
            ("mix[0]=C", "mix"),
        ] {
            match apply_set(&mut t, bad) {
                Err(e) => assert!(e.to_string().contains(why), "{bad}: {e}"),
                // Replacing a whole element with a scalar is caught by the typed read.
                Ok(()) => assert_eq!(bad, "mix[0]=C"),
            }
        }
    }
}
