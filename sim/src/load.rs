//! The front door: an experiment from its file (its `--set` and `--vary` values, its
//! `[[jobs]]` each an experiment of its own), and the workload an experiment runs (compiled
//! from its model, imported from SimAI or Chakra files, or its jobs' combined). It sits above
//! the experiment, the jobs, the workload IR and the importers, so none of them imports
//! another to be loaded.

use std::path::Path;

use crate::config::{self, ConfigError, LoadedConfig, Origin, Overrides, Value};
use crate::experiment::Experiment;
use crate::interop;
use crate::jobs;
use crate::workload::{self, Workload};

impl Experiment {
    /// Reads and validates an experiment file with its overrides (`--set`, `--vary`, a plan
    /// candidate's): the front door every command comes through.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Experiment, ConfigError> {
        Self::from_loaded(config::load(path, overrides)?)
    }

    /// [`Experiment::load`] for the text of an experiment file already in memory (see
    /// [`config::load_text`]): what the fuzz target `config` reads.
    pub fn from_text(
        path: &Path,
        text: &str,
        overrides: &Overrides,
    ) -> Result<Experiment, ConfigError> {
        Self::from_loaded(config::load_text(path, text, overrides)?)
    }

    /// The cluster of an experiment or cluster file, resized to the whole hosts that hold
    /// `gpus` GPUs, with the model, layout, workload and jobs dropped for a minimal one: what
    /// `fleetsim collective` runs its one-operation workloads on (their layout is their own).
    pub fn load_cluster(
        path: &Path,
        overrides: &Overrides,
        gpus: u32,
    ) -> Result<Experiment, ConfigError> {
        let mut tree = config::load_tree(path, overrides)?;
        for key in ["model", "parallel", "training", "workload_file", "jobs"] {
            tree.remove(key);
        }
        let gpus_per_host = match tree
            .lookup(&config::parse_path("cluster.gpus_per_host"))
            .map(|v| &v.value)
        {
            Some(Value::Integer(n)) if *n > 0 => u64::try_from(*n).unwrap_or(1),
            // A bad value is reported by the typed read below.
            _ => u64::from(config::defaults::gpus_per_host()),
        };
        let hosts = u64::from(gpus.max(1)).div_ceil(gpus_per_host);
        let collective = Origin::Derived("fleetsim collective".into());
        let resized = Origin::Derived(format!("--gpus {gpus} (whole hosts of {gpus_per_host})"));
        let cluster_gpus = i64::try_from(hosts * gpus_per_host).unwrap_or(i64::MAX);
        let mut minimal = Overrides::none();
        minimal.set("cluster.gpus", cluster_gpus, &resized);
        if tree.lookup(&config::parse_path("name")).is_none() {
            minimal.set("name", "collective", &collective);
        }
        // The model only has to be valid: the workload is the collective alone.
        minimal.set("model.preset", "llama2-7b", &collective).set(
            "training.memory_check",
            "off",
            &collective,
        );
        minimal.apply(&mut tree)?;
        Self::from_loaded(config::from_tree(tree, path)?)
    }

    /// Validates a loaded experiment file, its `[[jobs]]` included.
    pub fn from_loaded(loaded: LoadedConfig) -> Result<Experiment, ConfigError> {
        Experiment::from_checked(loaded, &jobs::from_loaded)
    }
}

/// What `workload_file` may name, for errors about a path that is not there.
const WORKLOAD_FILES: &str = "give the path of a SimAI workload file or of Chakra traces (a .et file, a folder of PREFIX.<rank>.et, or that PREFIX)";

/// The experiment's workload: the SimAI file or Chakra traces named by `workload_file` (or
/// `override_file`) when there is one, else the model compiled under the parallel layout.
pub fn load_or_compile(
    exp: &Experiment,
    override_file: Option<&std::path::Path>,
) -> Result<Workload, ConfigError> {
    if !exp.jobs.is_empty() {
        if let Some(p) = override_file {
            return Err(ConfigError::plain(
                &p.display().to_string(),
                "",
                "an experiment with [[jobs]] compiles each job's model; a workload file cannot replace them",
            ));
        }
        let workloads = exp
            .jobs
            .iter()
            .map(|job| workload::compile(&job.exp))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(jobs::combine(
            &exp.jobs,
            workloads,
            exp.loaded.config.cluster.gpus,
        ));
    }
    // `--workload-file` names a path as given; `workload_file` is resolved against the
    // experiment file, and its error names the key.
    let (path, from_config) = match (override_file, &exp.loaded.config.workload_file) {
        (Some(p), _) => (Some(p.to_path_buf()), false),
        (None, Some(written)) => (
            Some(exp.loaded.resolve_path("workload_file", written)),
            true,
        ),
        (None, None) => (None, false),
    };
    if let Some(path) = &path
        && !path.is_file()
        && !interop::chakra::is_chakra(path)
    {
        return Err(match from_config {
            true => exp.loaded.error(
                "workload_file",
                format!(
                    "cannot read `{}` (resolved relative to the experiment file); {WORKLOAD_FILES}",
                    path.display()
                ),
            ),
            false => ConfigError::plain(
                &path.display().to_string(),
                "",
                format!("does not exist; {WORKLOAD_FILES}"),
            ),
        });
    }
    match path {
        Some(path) if interop::chakra::is_chakra(&path) => {
            let context = interop::chakra_convert::ImportContext::from_experiment(exp);
            interop::chakra_convert::import(&path, &context)
        }
        Some(path) => {
            let file = interop::simai::load(&path)?;
            interop::simai_convert::import(
                &file,
                &path.display().to_string(),
                exp.loaded.config.cluster.gpus,
            )
        }
        None => workload::compile(exp),
    }
}
