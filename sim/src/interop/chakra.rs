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
    } else if !rank_file(path, 0).is_file() {
        // Neither a file, a folder nor the prefix of per-rank traces: say that, not that
        // `PATH.0.et` is missing.
        return Err(ConfigError::plain(
            &shown,
            "",
            "does not exist; give a .et file that every rank runs, a folder of per-rank traces PREFIX.<rank>.et, or that PREFIX",
        ));
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
    // Any rank past the cluster's, not only the next one: a stray `t.9.et` beside eight
    // traces is as wrong as `t.8.et`.
    if let Some(rank) = ranks_beyond(&prefix, world) {
        return Err(ConfigError::plain(
            &shown,
            "",
            format!(
                "has a trace for rank {rank} (`{}`) but cluster.gpus = {world}; the traces are for a larger cluster",
                rank_file(&prefix, rank).display()
            ),
        ));
    }
    Ok(TraceFiles::PerRank(files))
}

/// The highest rank at or past `world` that has a trace `prefix.<rank>.et`, if any.
fn ranks_beyond(prefix: &Path, world: u32) -> Option<u32> {
    let dir = match prefix.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let stem = prefix.file_name()?.to_string_lossy().into_owned();
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            match split_rank_name(&name) {
                Some((p, rank)) if p == stem && rank >= world => Some(rank),
                _ => None,
            }
        })
        .max()
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
    let trace = fleetsim_chakra::decode(bytes).map_err(|e| {
        ConfigError::plain(
            file,
            "",
            format!("{e} (a Chakra trace: length-delimited GlobalMetadata then Nodes)"),
        )
    })?;
    // A rank with no nodes would run an iteration of 0 s and pass it off as a result.
    if trace.nodes.is_empty() {
        return Err(ConfigError::plain(
            file,
            "",
            "holds a GlobalMetadata and no nodes: every rank of a training step runs work; give the trace its ComputeNodes and CommNodes (or export it again)",
        ));
    }
    Ok(trace)
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
