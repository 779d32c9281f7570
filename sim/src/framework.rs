//! Training frameworks as data: `configs/frameworks.toml` (embedded) names each framework
//! release a measurement was taken with and states what it launched with, as the experiment
//! keys fleetsim has, each fact with its source. `fleetsim validate` fills what a row of a
//! measurement table leaves out from the release its `framework` column names.
//!
//! Facts fleetsim has no experiment key for yet (Apex's bucket size in MB) are kept typed
//! under `not_yet_applied`, with their sources, and applied to nothing.

use std::path::Path;

use serde::Deserialize;

use crate::config::{
    AttentionBackend, CrossEntropyFusion, CudaGraphs, Fp8Recipe, Routing, TeRelease, TpOverlapSms,
};

/// Where the shipped table lives in the source tree (named in its errors).
pub const SHIPPED_FILE: &str = "configs/frameworks.toml";

/// One fact and where it is stated (repository and file at a commit or release, or a paper's
/// section).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fact<T> {
    pub value: T,
    pub source: String,
}

/// A framework release and what it launched with.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Framework {
    /// What tables write in their `framework` column, e.g. `nemo-24.05`.
    pub name: String,
    /// What it is: the release, and how the measurements that name it were launched.
    pub what: String,
    pub model: ModelFacts,
    pub parallel: ParallelFacts,
    pub training: TrainingFacts,
    /// `[network]` keys of the cluster the release's measurements ran on, where they follow
    /// from the release (its NCCL) and that cluster's fabric.
    #[serde(default)]
    pub network: NetworkFacts,
    #[serde(default)]
    pub not_yet_applied: PendingFacts,
}

/// `[network]` keys.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkFacts {
    /// Adaptive routing on InfiniBand: NCCL 2.16 and later use it wherever the subnet
    /// manager enables it on the switches.
    pub routing: Option<Fact<Routing>>,
}

/// `[model]` keys the framework's recipes set.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFacts {
    pub attention_dropout: Fact<f64>,
    pub tied_embeddings: Fact<bool>,
}

/// `[parallel]` keys.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelFacts {
    /// 1 is Megatron's distributed optimizer.
    pub zero: Fact<u32>,
    /// Sequence parallelism wherever TP > 1 (Megatron-LM turns it off at TP 1).
    pub sequence_parallel: Fact<bool>,
}

/// `[training]` keys. Every framework states the ones that are not `Option`, so that no row
/// silently takes a fleetsim default for them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingFacts {
    pub flash_attention: Fact<bool>,
    pub attention_backend: Option<Fact<AttentionBackend>>,
    pub tp_comm_overlap: Fact<bool>,
    pub overlap_grad_reduce: Fact<bool>,
    pub overlap_param_gather: Fact<bool>,
    pub overlap_p2p_comm: Fact<bool>,
    pub p2p_scatter_gather: Fact<bool>,
    pub fp8_recipe: Option<Fact<Fp8Recipe>>,
    pub fp8_param_gather: Option<Fact<bool>>,
    pub grad_reduce_in_bf16: Option<Fact<bool>>,
    pub moe_router_padding_for_quantization: Option<Fact<bool>>,
    pub bucket_params: Option<Fact<u64>>,
    pub cuda_graphs: Option<Fact<CudaGraphs>>,
    pub cross_entropy_fusion: Option<Fact<CrossEntropyFusion>>,
    pub transformer_engine: Option<Fact<TeRelease>>,
    /// The launcher's userbuffers settings, where one recipe is all the framework runs.
    pub tp_comm_overlap_sms: Option<Fact<TpOverlapSms>>,
}

/// Facts with no experiment key yet: recorded, applied to nothing.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingFacts {
    /// Apex `DistributedFusedAdam`'s `bucket_cap_mb` (NeMo 1.0's `optim.bucket_cap_mb`): a size
    /// in MB of a dtype fleetsim does not model, so not converted to `training.bucket_params`.
    pub bucket_cap_mb: Option<Fact<f64>>,
}

/// One experiment key a framework sets: `section.key = value`, and its source.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchKey<'a> {
    pub section: &'static str,
    pub key: &'static str,
    pub value: toml::Value,
    pub source: &'a str,
}

impl LaunchKey<'_> {
    /// Whether the key takes effect only in FP8 runs: Megatron reads `--fp8-recipe` and
    /// `--fp8-param-gather` only with `--fp8-format` (`arguments.py`), so a release's FP8
    /// launch options say nothing about its BF16, MXFP8 or NVFP4 runs.
    pub fn fp8_only(&self) -> bool {
        matches!(self.key, "fp8_recipe" | "fp8_param_gather")
    }
}

/// A fact fleetsim cannot apply yet, in words.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingFact<'a> {
    pub name: &'static str,
    pub value: String,
    pub source: &'a str,
}

impl Framework {
    /// The experiment keys this framework sets, `[model]`, then `[parallel]`, then
    /// `[training]`, then `[network]`. Sequence parallelism is not among them: it depends on the row's TP
    /// ([`ParallelFacts::sequence_parallel`]).
    pub fn launch_keys(&self) -> Vec<LaunchKey<'_>> {
        fn key<'a, T>(
            section: &'static str,
            key: &'static str,
            fact: &'a Fact<T>,
            value: impl FnOnce(&T) -> toml::Value,
        ) -> LaunchKey<'a> {
            LaunchKey {
                section,
                key,
                value: value(&fact.value),
                source: &fact.source,
            }
        }
        let boolean = |v: &bool| toml::Value::Boolean(*v);
        let (m, p, t) = (&self.model, &self.parallel, &self.training);
        let mut keys = vec![
            key("model", "attention_dropout", &m.attention_dropout, |v| {
                toml::Value::Float(*v)
            }),
            key("model", "tied_embeddings", &m.tied_embeddings, boolean),
            key("parallel", "zero", &p.zero, |v| {
                toml::Value::Integer(i64::from(*v))
            }),
            key("training", "flash_attention", &t.flash_attention, boolean),
        ];
        if let Some(f) = &t.attention_backend {
            keys.push(key("training", "attention_backend", f, |v| {
                toml::Value::String(v.name().into())
            }));
        }
        for (name, fact) in [
            ("tp_comm_overlap", &t.tp_comm_overlap),
            ("overlap_grad_reduce", &t.overlap_grad_reduce),
            ("overlap_param_gather", &t.overlap_param_gather),
            ("overlap_p2p_comm", &t.overlap_p2p_comm),
            ("p2p_scatter_gather", &t.p2p_scatter_gather),
        ] {
            keys.push(key("training", name, fact, boolean));
        }
        if let Some(f) = &t.fp8_recipe {
            keys.push(key("training", "fp8_recipe", f, |v| {
                toml::Value::String(v.name().into())
            }));
        }
        for (name, fact) in [
            ("fp8_param_gather", &t.fp8_param_gather),
            ("grad_reduce_in_bf16", &t.grad_reduce_in_bf16),
            (
                "moe_router_padding_for_quantization",
                &t.moe_router_padding_for_quantization,
            ),
        ] {
            if let Some(f) = fact {
                keys.push(key("training", name, f, boolean));
            }
        }
        if let Some(f) = &t.cuda_graphs {
            keys.push(key("training", "cuda_graphs", f, |v| {
                toml::Value::String(v.name().into())
            }));
        }
        if let Some(f) = &t.cross_entropy_fusion {
            keys.push(key("training", "cross_entropy_fusion", f, |v| {
                toml::Value::String(v.name().into())
            }));
        }
        if let Some(f) = &t.transformer_engine {
            keys.push(key("training", "transformer_engine", f, |v| {
                toml::Value::String(v.to_string())
            }));
        }
        if let Some(f) = &t.tp_comm_overlap_sms {
            keys.push(key("training", "tp_comm_overlap_sms", f, |v| {
                toml::Value::Table(
                    v.entries()
                        .into_iter()
                        .filter_map(|(name, sms)| {
                            sms.map(|s| (name.to_string(), toml::Value::Integer(i64::from(s))))
                        })
                        .collect(),
                )
            }));
        }
        if let Some(f) = &t.bucket_params {
            // Bounded by the loader to what TOML's integers hold.
            keys.push(key("training", "bucket_params", f, |v| {
                toml::Value::Integer(i64::try_from(*v).unwrap_or(i64::MAX))
            }));
        }
        if let Some(f) = &self.network.routing {
            keys.push(key("network", "routing", f, |v| {
                toml::Value::String(v.name().into())
            }));
        }
        keys
    }

    /// The facts recorded but not applied.
    pub fn pending(&self) -> Vec<PendingFact<'_>> {
        let n = &self.not_yet_applied;
        let mut facts = Vec::new();
        if let Some(f) = &n.bucket_cap_mb {
            facts.push(PendingFact {
                name: "bucket_cap_mb",
                value: f.value.to_string(),
                source: &f.source,
            });
        }
        facts
    }

    /// Every source this framework cites, with the key it is for.
    fn sources(&self) -> Vec<(String, &str)> {
        let mut all: Vec<(String, &str)> = self
            .launch_keys()
            .into_iter()
            .map(|k| (format!("{}.{}", k.section, k.key), k.source))
            .collect();
        all.push((
            "parallel.sequence_parallel".into(),
            &self.parallel.sequence_parallel.source,
        ));
        all.extend(
            self.pending()
                .into_iter()
                .map(|p| (format!("not_yet_applied.{}", p.name), p.source)),
        );
        all
    }
}

/// The framework table: every release, in file order, names unique.
#[derive(Debug, Clone, PartialEq)]
pub struct Frameworks {
    file: String,
    list: Vec<Framework>,
}

/// A framework table that cannot be used, on one line naming the file, the line and the key.
#[derive(Debug, thiserror::Error)]
pub enum FrameworkTableError {
    #[error("{file}: cannot be read: {error}")]
    Read { file: String, error: std::io::Error },
    #[error("{file}:{line}: {key}: {message}")]
    Entry {
        file: String,
        line: usize,
        key: String,
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TableFile {
    framework: Vec<Framework>,
}

/// The longest name a table may give (names become parts of file names and table columns).
const MAX_NAME_CHARS: usize = 64;

impl Frameworks {
    /// The table shipped in the binary.
    pub fn shipped() -> Result<Self, FrameworkTableError> {
        Self::parse(crate::embedded::FRAMEWORKS, SHIPPED_FILE)
    }

    /// A table from a file (a user's own frameworks).
    pub fn read(path: &Path) -> Result<Self, FrameworkTableError> {
        use std::io::Read as _;
        let file = path.display().to_string();
        let read_error = |error| FrameworkTableError::Read {
            file: file.clone(),
            error,
        };
        // Bounded like an experiment file: `/dev/zero` is an error, not a read without end.
        let limit = crate::config::MAX_EXPERIMENT_BYTES;
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(limit + 1).read_to_end(&mut bytes))
            .map_err(read_error)?;
        if bytes.len() as u64 > limit {
            return Err(read_error(std::io::Error::other(format!(
                "larger than {} MiB; a framework table is a short TOML text",
                limit >> 20
            ))));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            read_error(std::io::Error::other(format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            )))
        })?;
        Self::parse(&text, &file)
    }

    /// Parses a table; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Self, FrameworkTableError> {
        let line_of = |offset: usize| 1 + text[..offset.min(text.len())].matches('\n').count();
        let entry = |line: usize, key: String, message: String| FrameworkTableError::Entry {
            file: file.to_string(),
            line,
            key,
            message,
        };
        let deserializer = toml::Deserializer::parse(text).map_err(|e| {
            let line = e.span().map_or(1, |s| line_of(s.start));
            entry(line, "(file)".into(), e.message().trim().to_string())
        })?;
        let table: TableFile = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let line = e.inner().span().map_or(1, |s| line_of(s.start));
            let path = e.path().to_string();
            let key = if path == "." { "(file)".into() } else { path };
            entry(line, key, e.inner().message().trim().to_string())
        })?;
        // Serde read the types; what it cannot check, by the framework's place in the file.
        let line_of_entry = |i: usize| {
            text.match_indices("[[framework]]")
                .nth(i)
                .map_or(1, |(at, _)| line_of(at))
        };
        let mut seen: Vec<&str> = Vec::new();
        for (i, f) in table.framework.iter().enumerate() {
            let line = line_of_entry(i);
            let at = |key: &str| format!("framework[{i}] ({}).{key}", f.name);
            let name_ok = !f.name.is_empty()
                && f.name.chars().count() <= MAX_NAME_CHARS
                && f.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
            if !name_ok {
                return Err(entry(
                    line,
                    format!("framework[{i}].name"),
                    format!(
                        "`{}` is not a name: use 1 to {MAX_NAME_CHARS} letters, digits, `-`, `.` or `_`, e.g. nemo-24.05",
                        f.name
                    ),
                ));
            }
            if seen.contains(&f.name.as_str()) {
                return Err(entry(
                    line,
                    at("name"),
                    format!("`{}` is named twice; names are unique", f.name),
                ));
            }
            seen.push(&f.name);
            if f.what.trim().is_empty() {
                return Err(entry(
                    line,
                    at("what"),
                    "is empty; say what the release is and how it was launched".into(),
                ));
            }
            for (key, source) in f.sources() {
                if source.trim().is_empty() {
                    return Err(entry(
                        line,
                        at(&format!("{key}.source")),
                        "is empty; every fact names its source (repository and file at a commit or release, or a paper's section)".into(),
                    ));
                }
            }
            let dropout = f.model.attention_dropout.value;
            if !(0.0..1.0).contains(&dropout) {
                return Err(entry(
                    line,
                    at("model.attention_dropout.value"),
                    format!("must be a probability in [0, 1), got {dropout}"),
                ));
            }
            if f.parallel.zero.value > 3 {
                return Err(entry(
                    line,
                    at("parallel.zero.value"),
                    format!("must be 0 to 3, got {}", f.parallel.zero.value),
                ));
            }
            if let Some(b) = &f.training.bucket_params
                && (b.value == 0 || i64::try_from(b.value).is_err())
            {
                return Err(entry(
                    line,
                    at("training.bucket_params.value"),
                    format!("must be a positive count of parameters, got {}", b.value),
                ));
            }
            if let Some(mb) = &f.not_yet_applied.bucket_cap_mb
                && !(mb.value.is_finite() && mb.value > 0.0)
            {
                return Err(entry(
                    line,
                    at("not_yet_applied.bucket_cap_mb.value"),
                    format!("must be a positive number of MB, got {}", mb.value),
                ));
            }
        }
        if table.framework.is_empty() {
            return Err(entry(
                1,
                "framework".into(),
                "the table lists no framework; add a [[framework]] entry".into(),
            ));
        }
        Ok(Frameworks {
            file: file.to_string(),
            list: table.framework,
        })
    }

    /// The file the table was read from.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The release a table's `framework` column names.
    pub fn get(&self, name: &str) -> Option<&Framework> {
        self.list.iter().find(|f| f.name == name)
    }

    /// The release whose launch facts stand in for `name` when the table does not list it: the
    /// same family's latest release not newer than `name`, else the family's earliest. None
    /// when the table has no release of that family (or `name` has no version).
    pub fn stand_in(&self, name: &str) -> Option<&Framework> {
        let (family, version) = family_and_version(name)?;
        let same: Vec<(&Framework, Vec<u32>)> = self
            .list
            .iter()
            .filter_map(|f| {
                let (f_family, f_version) = family_and_version(&f.name)?;
                (f_family == family).then_some((f, f_version))
            })
            .collect();
        let by_version =
            |a: &&(&Framework, Vec<u32>), b: &&(&Framework, Vec<u32>)| compare_versions(&a.1, &b.1);
        same.iter()
            .filter(|(_, v)| compare_versions(v, &version).is_le())
            .max_by(by_version)
            .or_else(|| same.iter().min_by(by_version))
            .map(|(f, _)| *f)
    }

    /// Every release, in file order.
    pub fn all(&self) -> &[Framework] {
        &self.list
    }

    /// The names, in file order, joined for an error message.
    pub fn names(&self) -> String {
        self.list
            .iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A release name as its family (the name with its version part replaced by `*`) and the
/// version's numbers: `nemo-24.07` is (`nemo-*`, [24, 7]), `mlperf-training-5.1-nvidia` is
/// (`mlperf-training-*-nvidia`, [5, 1]), `megatron-lm-2022` is (`megatron-lm-*`, [2022]).
/// The version is the first `-`-separated part made of dot-separated digits alone.
fn family_and_version(name: &str) -> Option<(String, Vec<u32>)> {
    let parts: Vec<&str> = name.split('-').collect();
    let is_version = |part: &&str| {
        part.split('.')
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    let at = parts.iter().position(is_version)?;
    let version = parts[at]
        .split('.')
        .map(|n| n.parse().ok())
        .collect::<Option<Vec<u32>>>()?;
    let family = parts
        .iter()
        .enumerate()
        .map(|(i, part)| if i == at { "*" } else { part })
        .collect::<Vec<_>>()
        .join("-");
    Some((family, version))
}

/// Versions compared number by number, a missing number read as 0 (`24.07` = `24.07.0`).
fn compare_versions(a: &[u32], b: &[u32]) -> std::cmp::Ordering {
    (0..a.len().max(b.len()))
        .map(|i| {
            let at = |v: &[u32]| v.get(i).copied().unwrap_or(0);
            at(a).cmp(&at(b))
        })
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A release the table does not list runs with its family's nearest release not newer than
    /// it (or the family's earliest); a family the table lacks has no stand-in.
    #[test]
    fn an_unlisted_release_stands_in_with_its_familys_nearest_earlier_one() {
        let table = Frameworks::shipped().expect("shipped table");
        let stand_in = |name: &str| table.stand_in(name).map(|f| f.name.as_str());
        assert_eq!(stand_in("nemo-24.08"), Some("nemo-24.07"));
        assert_eq!(stand_in("nemo-24.07.01"), Some("nemo-24.07"));
        assert_eq!(stand_in("nemo-25.11"), Some("nemo-25.07"));
        // The two releases issue 16 names that the table does not list.
        assert_eq!(stand_in("nemo-24.11"), Some("nemo-24.09"));
        assert_eq!(stand_in("nemo-25.09"), Some("nemo-25.07"));
        assert_eq!(stand_in("nemo-23.11"), Some("nemo-24.03"));
        assert_eq!(stand_in("megatron-core-0.12"), Some("megatron-core-0.8"));
        assert_eq!(
            stand_in("megatron-bridge-26.06"),
            Some("megatron-bridge-26.04")
        );
        assert_eq!(
            stand_in("mlperf-training-5.0-nvidia"),
            Some("mlperf-training-4.0-nvidia")
        );
        assert_eq!(stand_in("megatron-lm-2023"), Some("megatron-lm-2022"));
        for unknown in ["deepspeed", "deepspeed-0.14", "torchtitan-2025", "nemo", ""] {
            assert_eq!(stand_in(unknown), None, "{unknown}");
        }
        assert_eq!(
            family_and_version("nemo-24.07"),
            Some(("nemo-*".into(), vec![24, 7]))
        );
        assert_eq!(
            family_and_version("megatron-core-dsv3-gb200-2025"),
            Some(("megatron-core-dsv3-gb200-*".into(), vec![2025]))
        );
    }

    fn shipped() -> Frameworks {
        Frameworks::shipped().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn every_shipped_framework_parses_and_names_a_source_for_each_fact() {
        let table = shipped();
        assert!(table.all().len() >= 8, "{}", table.names());
        for f in table.all() {
            for (key, source) in f.sources() {
                // A citation names where: a repository path, a paper, a release.
                assert!(
                    source.len() >= 20,
                    "{}: {key}: `{source}` is too short to cite anything",
                    f.name
                );
            }
            // Every required key is set; optional ones only where a source states them.
            let keys: Vec<String> = f
                .launch_keys()
                .iter()
                .map(|k| format!("{}.{}", k.section, k.key))
                .collect();
            for required in [
                "model.attention_dropout",
                "model.tied_embeddings",
                "parallel.zero",
                "training.flash_attention",
                "training.tp_comm_overlap",
                "training.overlap_grad_reduce",
                "training.overlap_param_gather",
                "training.overlap_p2p_comm",
                "training.p2p_scatter_gather",
            ] {
                assert!(keys.iter().any(|k| k == required), "{}: {required}", f.name);
            }
        }
    }

    /// InfiniBand's adaptive routing where the release's NCCL uses it (2.16 and later) on a
    /// DGX SuperPOD; Megatron-LM of 2022 ran an older NCCL (and stands for MegaScale's
    /// Megatron baseline on RoCE), routed by ECMP.
    #[test]
    fn releases_with_nccl_2_16_or_later_route_adaptively_on_infiniband() {
        let table = shipped();
        let routing = |name: &str| {
            let f = table.get(name).unwrap_or_else(|| panic!("{name}"));
            f.launch_keys()
                .into_iter()
                .find(|k| k.section == "network" && k.key == "routing")
                .map(|k| (k.value.to_string(), k.source.to_string()))
        };
        assert_eq!(routing("megatron-lm-2022"), None);
        for name in [
            "megatron-core-0.8",
            "nemo-24.05",
            "nemo-25.04",
            "megatron-bridge-26.04",
        ] {
            let (value, source) = routing(name).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(value, "\"adaptive\"", "{name}");
            assert!(source.contains("NCCL 2.16.2"), "{name}: {source}");
        }
    }

    /// What `validate` preserved from the enum it replaces: Megatron-LM of 2022 on the
    /// critical path, Megatron-Core 0.8 overlapping, NeMo's launcher of early 2024 on
    /// FlashAttention-2, and the dropouts.
    #[test]
    fn the_frameworks_that_replaced_the_enum_keep_its_facts() {
        let table = shipped();
        let value = |name: &str, key: &str| {
            let f = table.get(name).unwrap_or_else(|| panic!("{name}"));
            f.launch_keys()
                .into_iter()
                .find(|k| format!("{}.{}", k.section, k.key) == key)
                .map(|k| k.value.to_string())
        };
        let of = |name: &str, key: &str| value(name, key).unwrap_or_else(|| panic!("{name} {key}"));
        assert_eq!(of("megatron-lm-2022", "training.flash_attention"), "false");
        assert_eq!(
            of("megatron-lm-2022", "training.p2p_scatter_gather"),
            "true"
        );
        assert_eq!(of("megatron-lm-2022", "parallel.zero"), "0");
        assert_eq!(of("megatron-lm-2022", "model.attention_dropout"), "0.1");
        assert_eq!(of("megatron-core-0.8", "training.tp_comm_overlap"), "true");
        assert_eq!(of("megatron-core-0.8", "model.tied_embeddings"), "false");
        assert_eq!(of("megatron-core-0.8", "parallel.zero"), "1");
        for nemo in ["nemo-24.03", "nemo-24.05", "nemo-24.07"] {
            assert_eq!(
                of(nemo, "training.attention_backend"),
                "\"flash2\"",
                "{nemo}"
            );
        }
        for later in ["nemo-24.09", "nemo-25.02", "megatron-bridge-25.11"] {
            assert_eq!(of(later, "model.attention_dropout"), "0.0", "{later}");
            assert_ne!(
                value(later, "training.attention_backend").as_deref(),
                Some("\"flash2\""),
                "{later}"
            );
        }
        let megatron_lm = table.get("megatron-lm-2022").expect("megatron-lm-2022");
        assert!(!megatron_lm.parallel.sequence_parallel.value);
        assert!(
            table
                .get("megatron-core-0.8")
                .expect("0.8")
                .parallel
                .sequence_parallel
                .value
        );
    }

    /// The names the shipped validation tables write in their `framework` column exist here.
    #[test]
    fn the_names_the_validation_tables_use_exist() {
        let table = shipped();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/validation");
        let mut used = 0;
        for entry in std::fs::read_dir(&dir).expect("configs/validation") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|e| e != "csv") {
                continue;
            }
            let mut reader = csv::ReaderBuilder::new()
                .comment(Some(b'#'))
                .trim(csv::Trim::All)
                .from_path(&path)
                .expect("a table");
            let column = reader
                .headers()
                .expect("a header")
                .iter()
                .position(|h| h == "framework")
                .unwrap_or_else(|| panic!("{} has no framework column", path.display()));
            for record in reader.records() {
                let record = record.expect("a record");
                let name = &record[column];
                assert!(
                    table.get(name).is_some(),
                    "{}: `{name}` is not in {SHIPPED_FILE} ({})",
                    path.display(),
                    table.names()
                );
                used += 1;
            }
        }
        assert!(used >= 62, "{used} rows");
    }

    #[test]
    fn cuda_graphs_are_applied_and_bucket_megabytes_pending() {
        let table = shipped();
        let of = |name: &str| table.get(name).expect(name);
        let graphs = |f: &Framework| {
            f.launch_keys()
                .into_iter()
                .find(|k| k.key == "cuda_graphs")
                .map(|k| k.value.to_string())
        };
        assert_eq!(
            graphs(of("mlperf-training-5.1-nvidia")).as_deref(),
            Some("\"full-iteration\"")
        );
        assert_eq!(graphs(of("nemo-25.04")).as_deref(), Some("\"none\""));
        let pending = of("nemo-24.05").pending();
        assert!(
            pending.iter().any(|p| p.name == "bucket_cap_mb"),
            "{pending:?}"
        );
        assert!(pending.iter().all(|p| p.name != "cuda_graphs"));
    }

    /// Every malformed table in tests/fixtures/bad-frameworks/ fails with one line naming the
    /// file, the line and the key its first line expects.
    #[test]
    fn bad_tables_fail_with_one_line_naming_file_line_and_key() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/bad-frameworks");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("tests/fixtures/bad-frameworks") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("a fixture");
            let want = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# expect: "))
                .unwrap_or_else(|| panic!("{}: no `# expect:` line", path.display()));
            let error = Frameworks::parse(&text, "bad.toml")
                .expect_err(&path.display().to_string())
                .to_string();
            assert_eq!(error.lines().count(), 1, "{}: {error}", path.display());
            assert!(error.starts_with("bad.toml:"), "{error}");
            assert!(
                error.contains(want),
                "{}: `{want}` in {error}",
                path.display()
            );
            seen += 1;
        }
        assert!(seen >= 6, "{seen} fixtures");
        let missing = Frameworks::read(&dir.join("absent.toml")).expect_err("absent");
        assert!(missing.to_string().contains("cannot be read"), "{missing}");
    }
}
