//! Chakra execution-trace files (`fleetsim_chakra`: the MLCommons schema and its framing):
//! where the per-rank traces of a `workload_file` are, reading them with errors that name the
//! file, and writing them.
//!
//! A `workload_file` is Chakra when it is a folder of per-rank traces (`prefix.<rank>.et`,
//! one per GPU), a file ending in `.et` (every rank runs that one trace), or the prefix of
//! per-rank traces (ASTRA-sim's convention: `dir/allreduce` names `dir/allreduce.0.et`, ...).

use std::path::{Path, PathBuf};

use fleetsim_chakra::Trace;

use crate::config::ConfigError;

/// The traces of one workload: one for every rank, or one that every rank runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceFiles {
    Shared(PathBuf),
    /// Rank `r`'s trace at index `r`.
    PerRank(Vec<PathBuf>),
}

/// Whether `path` names Chakra traces rather than a SimAI file.
pub fn is_chakra(path: &Path) -> bool {
    path.is_dir()
        || path.extension().is_some_and(|e| e == "et")
        || (!path.exists() && rank_file(path, 0).is_file())
}

/// `prefix.<rank>.et`.
fn rank_file(prefix: &Path, rank: u32) -> PathBuf {
    let mut name = prefix.as_os_str().to_os_string();
    name.push(format!(".{rank}.et"));
    PathBuf::from(name)
}

/// The (prefix, rank) of a file named `prefix.<rank>.et`.
fn split_rank_name(name: &str) -> Option<(&str, u32)> {
    let stem = name.strip_suffix(".et")?;
    let (prefix, rank) = stem.rsplit_once('.')?;
    Some((prefix, rank.parse().ok()?))
}

/// Finds the traces `path` names for a cluster of `world` GPUs.
pub fn locate(path: &Path, world: u32) -> Result<TraceFiles, ConfigError> {
    let shown = path.display().to_string();
    if path.is_file() {
        return Ok(TraceFiles::Shared(path.to_path_buf()));
    }
    let prefix = if path.is_dir() {
        let entries = std::fs::read_dir(path)
            .map_err(|e| ConfigError::plain(&shown, "", format!("cannot list the folder: {e}")))?;
        let mut prefixes: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                split_rank_name(&name).map(|(p, _)| p.to_string())
            })
            .collect();
        prefixes.sort();
        prefixes.dedup();
        match prefixes.as_slice() {
            [one] => path.join(one),
            [] => {
                return Err(ConfigError::plain(
                    &shown,
                    "",
                    "holds no Chakra trace named PREFIX.<rank>.et; give a folder of per-rank traces, or one .et file that every rank runs",
                ));
            }
            many => {
                return Err(ConfigError::plain(
                    &shown,
                    "",
                    format!(
                        "holds traces of {} prefixes ({}); keep one workload's per-rank traces in a folder",
                        many.len(),
                        many.join(", ")
                    ),
                ));
            }
        }
    } else {
        path.to_path_buf()
    };
    let files: Vec<PathBuf> = (0..world).map(|r| rank_file(&prefix, r)).collect();
    if let Some(missing) = files.iter().find(|f| !f.is_file()) {
        return Err(ConfigError::plain(
            &shown,
            "",
            format!(
                "no trace `{}`: per-rank Chakra traces need one file per GPU, ranks 0 to {} (cluster.gpus = {world})",
                missing.display(),
                world - 1
            ),
        ));
    }
    let extra = rank_file(&prefix, world);
    if extra.is_file() {
        return Err(ConfigError::plain(
            &shown,
            "",
            format!(
                "has a trace for rank {world} (`{}`) but cluster.gpus = {world}; the traces are for a larger cluster",
                extra.display()
            ),
        ));
    }
    Ok(TraceFiles::PerRank(files))
}

/// Reads and decodes one trace file.
pub fn read(path: &Path) -> Result<Trace, ConfigError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path)
        .map_err(|e| ConfigError::plain(&shown, "", format!("cannot read: {e}")))?;
    decode_bytes(&bytes, &shown)
}

/// Decodes the bytes of a trace file; `file` names it in errors.
pub fn decode_bytes(bytes: &[u8], file: &str) -> Result<Trace, ConfigError> {
    fleetsim_chakra::decode(bytes).map_err(|e| {
        ConfigError::plain(
            file,
            "",
            format!("{e} (a Chakra trace: length-delimited GlobalMetadata then Nodes)"),
        )
    })
}

/// The file of rank `rank` under `prefix` (`prefix.<rank>.et`), for the exporter.
pub fn output_file(prefix: &Path, rank: u32) -> PathBuf {
    rank_file(prefix, rank)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_names_split() {
        assert_eq!(
            split_rank_name("all_reduce.12.et"),
            Some(("all_reduce", 12))
        );
        assert_eq!(split_rank_name("a.b.3.et"), Some(("a.b", 3)));
        assert_eq!(split_rank_name("trace.et"), None);
        assert_eq!(rank_file(Path::new("d/x"), 2), PathBuf::from("d/x.2.et"));
    }
}
