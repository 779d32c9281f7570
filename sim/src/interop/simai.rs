//! SimAI's workload text format: a parser that reports every problem with file, line and field,
//! and a writer whose output the parser (and SimAI) read back unchanged.
//!
//! The format is the one read by SimAI (Wang et al., "SimAI: Unifying Architecture Design and
//! Optimization Tuning for Large-Scale Large Language Model Training with Scalability and
//! Precision", NSDI'25; <https://github.com/aliyun/SimAI>), in
//! `astra-sim-alibabacloud/astra-sim/workload/Workload.cc` (`Workload::initialize_workload`), and
//! written by its generator AICB (<https://github.com/aliyun/aicb>,
//! `workload_generator/SimAI_training_workload_generator.py` and
//! `SimAI_inference_workload_generator.py`). `tests/fixtures/simai/SOURCE.md` says where the
//! project's sample files and format notes come from.
//!
//! ```text
//! HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ep: 1 pp: 8 vpp: 12 ga: 32 all_gpus: 1024 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 50331648
//! 814
//! grad_gather  -1  1  NONE  0  1  NONE  0  1  ALLGATHER  4907335680  100
//! ...
//! ```
//!
//! Line 1 is the parallelism policy and `key: value` pairs, line 2 the number of layer lines,
//! then one line per layer with 12 fields (13 for `HYBRID_CUSTOMIZED`, whose last column is the
//! layer's own policy): `name dep fwd_compute_ns fwd_comm_type fwd_comm_bytes ig_compute_ns
//! ig_comm_type ig_comm_bytes wg_compute_ns wg_comm_type wg_comm_bytes wg_update_ns`.
//!
//! Quirks of real files that are accepted:
//! - fields separated by tabs or by runs of spaces (hand-written example files), trailing
//!   spaces, CRLF line ends, a missing newline at the end of the file, blank lines after (and
//!   between) the layer lines, a UTF-8 byte-order mark (with a warning);
//! - `pp_comm 50331648` without the colon (SimAI accepts both spellings);
//! - `checkpoints: N` and `checkpoint_initiates: N` are a count followed by N layer ids;
//! - header numbers written as Python floats (`pp_comm: 6291456.0`, which AICB writes when
//!   sequence parallelism divides the size by TP) are read as integers, with a warning;
//! - missing, unknown, duplicated (the last one wins, as in SimAI) and stray header tokens are
//!   warnings, like SimAI's "Input workload format mismatch" warning; so are values that SimAI's
//!   `std::stoi` could not hold (above 2147483647);
//! - a comm type `NONE` with bytes > 0 keeps its bytes; a collective with 0 bytes is kept.
//!
//! Stricter than SimAI, which reads the layers as one stream of whitespace-separated tokens and
//! silently maps unknown comm types to "no communication": here every layer must be on one line
//! with exactly its 12 (13) fields, and unknown comm types, unknown group suffixes, negative or
//! fractional times and sizes, and values that overflow 64 bits are errors naming the line and
//! field. Not UTF-8, NUL bytes or an empty file is one whole-file error; nothing panics.
//!
//! Where SimAI's reader (1.x, key-based header) differs, beyond leniency:
//! - its `checkpoints:` loop re-reads the first id for every count and files
//!   `checkpoint_initiates:` ids as checkpoints too; here each list is its own N ids (AICB
//!   always writes counts of 0, so real files are unaffected);
//! - it tests the prefix `ALLREDUCE` before `ALLREDUCEALLTOALL`, so it runs
//!   `ALLREDUCEALLTOALL` as an all-reduce with no group; here it stays
//!   [`SimaiCommKind::AllReduceAllToAll`];
//! - it reads the header keys only for the two transformer policies (a warning here when others
//!   carry them), and `mode:` not at all (AICB's inference generator writes `mode: 1`).
//!
//! Equality: [`SimaiLayer`] equality ignores [`SimaiLayer::line`] and [`SimaiFile`] equality
//! ignores [`SimaiFile::warnings`], since both describe where a workload came from rather than the
//! workload; so `parse(&write(&w), ..) == Ok(w)` holds for any workload `write` can express.

use std::collections::BTreeSet;
use std::path::Path;

use crate::config::{ConfigError, Origin};

/// The fields of a layer line, by the names SimAI's parser gives them (and errors use).
pub const LAYER_FIELDS: [&str; 12] = [
    "name",
    "dep",
    "fwd_compute_ns",
    "fwd_comm_type",
    "fwd_comm_bytes",
    "ig_compute_ns",
    "ig_comm_type",
    "ig_comm_bytes",
    "wg_compute_ns",
    "wg_comm_type",
    "wg_comm_bytes",
    "wg_update_ns",
];

/// The name of the 13th field of `HYBRID_CUSTOMIZED` layer lines.
pub const POLICY_FIELD: &str = "policy";

/// The parallelism policy, the first token of the header (SimAI's `decode_parallelsim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SimaiPolicy {
    HybridTransformerFwdInBckwd,
    HybridTransformer,
    Data,
    Model,
    HybridDataModel,
    HybridModelData,
    HybridDlrm,
    HybridDlrmEnhanced,
    HybridCustomized,
    Micro,
    DistributedInference,
}

impl SimaiPolicy {
    pub const ALL: [SimaiPolicy; 11] = [
        SimaiPolicy::HybridTransformerFwdInBckwd,
        SimaiPolicy::HybridTransformer,
        SimaiPolicy::Data,
        SimaiPolicy::Model,
        SimaiPolicy::HybridDataModel,
        SimaiPolicy::HybridModelData,
        SimaiPolicy::HybridDlrm,
        SimaiPolicy::HybridDlrmEnhanced,
        SimaiPolicy::HybridCustomized,
        SimaiPolicy::Micro,
        SimaiPolicy::DistributedInference,
    ];

    /// The token as written in the file.
    pub fn token(&self) -> &'static str {
        match self {
            SimaiPolicy::HybridTransformerFwdInBckwd => "HYBRID_TRANSFORMER_FWD_IN_BCKWD",
            SimaiPolicy::HybridTransformer => "HYBRID_TRANSFORMER",
            SimaiPolicy::Data => "DATA",
            SimaiPolicy::Model => "MODEL",
            SimaiPolicy::HybridDataModel => "HYBRID_DATA_MODEL",
            SimaiPolicy::HybridModelData => "HYBRID_MODEL_DATA",
            SimaiPolicy::HybridDlrm => "HYBRID_DLRM",
            SimaiPolicy::HybridDlrmEnhanced => "HYBRID_DLRM_ENHANCED",
            SimaiPolicy::HybridCustomized => "HYBRID_CUSTOMIZED",
            SimaiPolicy::Micro => "MICRO",
            SimaiPolicy::DistributedInference => "DISTRIBUTED_INFERENCE",
        }
    }

    /// The policy whose token is exactly `token` (case-sensitive, as in SimAI).
    pub fn parse(token: &str) -> Option<SimaiPolicy> {
        SimaiPolicy::ALL.into_iter().find(|p| p.token() == token)
    }

    /// Whether SimAI reads the `key: value` pairs of the header for this policy (it reads them
    /// only for the two transformer policies; `pp_comm` is read for every policy).
    pub fn reads_header_keys(&self) -> bool {
        matches!(
            self,
            SimaiPolicy::HybridTransformerFwdInBckwd | SimaiPolicy::HybridTransformer
        )
    }
}

/// The collective of one phase of a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SimaiCommKind {
    None,
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    AllReduceAllToAll,
}

impl SimaiCommKind {
    pub const ALL: [SimaiCommKind; 6] = [
        SimaiCommKind::None,
        SimaiCommKind::AllReduce,
        SimaiCommKind::AllGather,
        SimaiCommKind::ReduceScatter,
        SimaiCommKind::AllToAll,
        SimaiCommKind::AllReduceAllToAll,
    ];

    /// The token without group suffix.
    pub fn token(&self) -> &'static str {
        match self {
            SimaiCommKind::None => "NONE",
            SimaiCommKind::AllReduce => "ALLREDUCE",
            SimaiCommKind::AllGather => "ALLGATHER",
            SimaiCommKind::ReduceScatter => "REDUCESCATTER",
            SimaiCommKind::AllToAll => "ALLTOALL",
            SimaiCommKind::AllReduceAllToAll => "ALLREDUCEALLTOALL",
        }
    }

    /// The kind whose token is exactly `token` (no suffix, case-sensitive).
    pub fn parse(token: &str) -> Option<SimaiCommKind> {
        SimaiCommKind::ALL.into_iter().find(|k| k.token() == token)
    }
}

/// Which group a collective runs in. Without a suffix, fwd and ig communication is in the TP
/// group and wg communication in the DP group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum SimaiCommGroup {
    /// No suffix.
    #[default]
    Default,
    /// `_EP`: the expert-parallel group.
    Ep,
    /// `_DP_EP`: the data-parallel group of experts.
    DpEp,
}

impl SimaiCommGroup {
    /// The suffix appended to the comm type: ``, `_EP` or `_DP_EP`.
    pub fn suffix(&self) -> &'static str {
        match self {
            SimaiCommGroup::Default => "",
            SimaiCommGroup::Ep => "_EP",
            SimaiCommGroup::DpEp => "_DP_EP",
        }
    }
}

/// One phase's communication: the collective, its group and its message size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SimaiComm {
    pub kind: SimaiCommKind,
    pub group: SimaiCommGroup,
    pub bytes: u64,
}

impl SimaiComm {
    /// No communication.
    pub const NONE: SimaiComm = SimaiComm {
        kind: SimaiCommKind::None,
        group: SimaiCommGroup::Default,
        bytes: 0,
    };

    pub fn new(kind: SimaiCommKind, group: SimaiCommGroup, bytes: u64) -> Self {
        SimaiComm { kind, group, bytes }
    }

    /// The comm-type field as written: kind then group suffix, e.g. `ALLTOALL_EP`.
    pub fn type_token(&self) -> String {
        format!("{}{}", self.kind.token(), self.group.suffix())
    }

    /// Reads a comm-type field (`ALLGATHER_DP_EP`); `None` when it is not one.
    pub fn parse_type(token: &str) -> Option<(SimaiCommKind, SimaiCommGroup)> {
        let (base, group) = split_group(token);
        SimaiCommKind::parse(base).map(|kind| (kind, group))
    }
}

fn split_group(token: &str) -> (&str, SimaiCommGroup) {
    if let Some(base) = token.strip_suffix("_DP_EP") {
        (base, SimaiCommGroup::DpEp)
    } else if let Some(base) = token.strip_suffix("_EP") {
        (base, SimaiCommGroup::Ep)
    } else {
        (token, SimaiCommGroup::Default)
    }
}

/// One layer line. Equality ignores `line`.
#[derive(Debug, Clone, Eq)]
pub struct SimaiLayer {
    pub name: String,
    /// Dependency; -1 in every file seen (SimAI reads and prints it, nothing more).
    pub dep: i64,
    pub fwd_ns: u64,
    pub fwd: SimaiComm,
    pub ig_ns: u64,
    pub ig: SimaiComm,
    pub wg_ns: u64,
    pub wg: SimaiComm,
    pub wg_update_ns: u64,
    /// The 13th column of `HYBRID_CUSTOMIZED` files: the layer's own policy token. SimAI falls back
    /// to the file's policy when it is not a policy it knows.
    pub policy: Option<String>,
    /// 1-based line in the file it came from; 0 when built in memory.
    pub line: u32,
}

impl PartialEq for SimaiLayer {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.dep == other.dep
            && self.fwd_ns == other.fwd_ns
            && self.fwd == other.fwd
            && self.ig_ns == other.ig_ns
            && self.ig == other.ig
            && self.wg_ns == other.wg_ns
            && self.wg == other.wg
            && self.wg_update_ns == other.wg_update_ns
            && self.policy == other.policy
    }
}

impl SimaiLayer {
    /// A layer without compute or communication, `dep` -1, as built in memory (`line` 0).
    pub fn new(name: impl Into<String>) -> Self {
        SimaiLayer {
            name: name.into(),
            dep: -1,
            fwd_ns: 0,
            fwd: SimaiComm::NONE,
            ig_ns: 0,
            ig: SimaiComm::NONE,
            wg_ns: 0,
            wg: SimaiComm::NONE,
            wg_update_ns: 0,
            policy: None,
            line: 0,
        }
    }
}

/// The header line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimaiHeader {
    pub policy: SimaiPolicy,
    /// `model_parallel_NPU_group:` (TP size).
    pub tp: Option<u32>,
    pub ep: Option<u32>,
    pub pp: Option<u32>,
    /// AICB writes the number of layers per pipeline stage here, not Megatron's virtual stages.
    pub vpp: Option<u32>,
    /// Gradient-accumulation steps.
    pub ga: Option<u32>,
    pub all_gpus: Option<u32>,
    /// Layer ids of `checkpoints: N id...` (activation recomputation).
    pub checkpoints: Vec<u32>,
    /// Layer ids of `checkpoint_initiates: N id...`.
    pub checkpoint_initiates: Vec<u32>,
    /// `pp_comm:` (or `pp_comm`): bytes sent between pipeline stages per micro-batch.
    pub pp_comm: Option<u64>,
    /// `mode: 1`, written by AICB's inference generator.
    pub inference: bool,
}

impl SimaiHeader {
    /// A header with the policy and no keys.
    pub fn new(policy: SimaiPolicy) -> Self {
        SimaiHeader {
            policy,
            tp: None,
            ep: None,
            pp: None,
            vpp: None,
            ga: None,
            all_gpus: None,
            checkpoints: Vec::new(),
            checkpoint_initiates: Vec::new(),
            pp_comm: None,
            inference: false,
        }
    }

    /// DP = all_gpus / (TP × PP), when all three are given and it divides evenly.
    pub fn dp(&self) -> Option<u32> {
        let model = self.tp?.checked_mul(self.pp?)?;
        let all = self.all_gpus?;
        (model > 0 && all % model == 0).then(|| all / model)
    }
}

/// A whole workload file. Equality compares header and layers, not `warnings` (nor the layers'
/// `line`).
#[derive(Debug, Clone, Eq)]
pub struct SimaiFile {
    pub header: SimaiHeader,
    pub layers: Vec<SimaiLayer>,
    /// What SimAI would warn about or silently ignore, each as `FILE:LINE: `key`: message`.
    pub warnings: Vec<String>,
}

impl PartialEq for SimaiFile {
    fn eq(&self, other: &Self) -> bool {
        self.header == other.header && self.layers == other.layers
    }
}

/// Reads a workload file from disk; errors name `path` as displayed.
pub fn load(path: &Path) -> Result<SimaiFile, ConfigError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path)
        .map_err(|e| ConfigError::at_file(&file, format!("cannot be read: {e}")))?;
    parse_bytes(&bytes, &file)
}

/// Parses raw bytes: NUL bytes or invalid UTF-8 are one whole-file error.
pub fn parse_bytes(bytes: &[u8], file: &str) -> Result<SimaiFile, ConfigError> {
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Err(binary_error(file, at));
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => parse(text, file),
        Err(e) => Err(ConfigError::at_file(
            file,
            format!(
                "is not UTF-8 text (invalid byte 0x{:02X} at offset {}); a SimAI workload is a text file",
                bytes.get(e.valid_up_to()).copied().unwrap_or(0),
                e.valid_up_to()
            ),
        )),
    }
}

fn binary_error(file: &str, offset: usize) -> ConfigError {
    ConfigError::at_file(
        file,
        format!("is binary (NUL byte at offset {offset}), not a SimAI workload text file"),
    )
}

/// Parses the text of a workload file; `file` is the name errors and warnings give.
pub fn parse(text: &str, file: &str) -> Result<SimaiFile, ConfigError> {
    let mut cx = Cx {
        file,
        warnings: Vec::new(),
    };
    let text = match text.strip_prefix('\u{feff}') {
        Some(rest) => {
            cx.warn(
                1,
                "",
                "starts with a UTF-8 byte-order mark, which SimAI does not skip",
            );
            rest
        }
        None => text,
    };
    if let Some(at) = text.find('\0') {
        return Err(binary_error(file, at));
    }
    if is_blank(text) {
        return Err(ConfigError::at_file(
            file,
            "is empty; a SimAI workload has a header line (the parallelism policy and \
             `key: value` pairs), a line with the layer count, then one line per layer",
        ));
    }
    let mut lines = text
        .split('\n')
        .enumerate()
        .map(|(i, l)| (u32::try_from(i + 1).unwrap_or(u32::MAX), l));

    // Line 1: the header (the text is not blank, so there is a first line).
    let first = lines.next().map(|(_, l)| l).unwrap_or_default();
    let header = parse_header(first, &mut cx)?;

    // Line 2: the layer count.
    let count = match lines.next() {
        Some((n, l)) => parse_count(l, n, &cx)?,
        None => {
            return Err(cx.err(
                2,
                "count",
                "missing: line 2 must hold the number of layer lines that follow the header",
            ));
        }
    };

    let customized = header.policy == SimaiPolicy::HybridCustomized;
    // The count is only a claim: reserve no more than the lines that follow can hold.
    let room = lines.clone().filter(|(_, l)| !is_blank(l)).count();
    let mut layers = Vec::with_capacity(count.min(room));
    let mut last_content_line = 2;
    for (n, l) in lines {
        if is_blank(l) {
            continue;
        }
        if layers.len() == count {
            return Err(cx.err(
                n,
                "count",
                format!(
                    "one layer line more than the {count} announced on line 2; fix the count \
                     or remove the extra lines"
                ),
            ));
        }
        layers.push(parse_layer(l, n, customized, &mut cx)?);
        last_content_line = n;
    }
    if layers.len() < count {
        return Err(cx.err(
            last_content_line.saturating_add(1),
            "count",
            format!(
                "line 2 announces {count} layer lines but the file ends after {}",
                layers.len()
            ),
        ));
    }

    check_checkpoints(&header, layers.len(), &mut cx);
    Ok(SimaiFile {
        header,
        layers,
        warnings: cx.warnings,
    })
}

/// Writes the workload as SimAI reads it (and as AICB writes it): the header, the count, one
/// tab-separated line per layer, a final newline.
///
/// Header keys that are `None` are left out; `mode: 1` follows `all_gpus` when `inference`;
/// `checkpoints:` and `checkpoint_initiates:` are written for `HYBRID_TRANSFORMER_FWD_IN_BCKWD`
/// (the policy SimAI reads them for) or when not empty; `pp_comm:` comes last, with its colon.
/// Unknown header keys of a parsed file are not kept.
///
/// [`parse`] reads the result back equal to `workload` when the workload is one the format can
/// hold: `tp`, `pp`, `ga` and `all_gpus` at least 1 when given; names (and per-layer policies)
/// non-empty and free of whitespace, NUL and line breaks (such characters are written as `_`,
/// an empty name as `_`); `policy` given exactly for the layers of a `HYBRID_CUSTOMIZED` file
/// (a missing one is written as `NONE`, after which SimAI uses the file's policy; under other
/// policies it is not written). Every parsed file is such a workload.
pub fn write(workload: &SimaiFile) -> String {
    let h = &workload.header;
    let mut out = String::from(h.policy.token());
    let mut key = |name: &str, value: Option<u64>| {
        if let Some(v) = value {
            out.push_str(&format!(" {name}: {v}"));
        }
    };
    key("model_parallel_NPU_group", h.tp.map(u64::from));
    key("ep", h.ep.map(u64::from));
    key("pp", h.pp.map(u64::from));
    key("vpp", h.vpp.map(u64::from));
    key("ga", h.ga.map(u64::from));
    key("all_gpus", h.all_gpus.map(u64::from));
    key("mode", h.inference.then_some(1));
    let lists = h.policy == SimaiPolicy::HybridTransformerFwdInBckwd
        || !h.checkpoints.is_empty()
        || !h.checkpoint_initiates.is_empty();
    if lists {
        for (name, ids) in [
            ("checkpoints", &h.checkpoints),
            ("checkpoint_initiates", &h.checkpoint_initiates),
        ] {
            out.push_str(&format!(" {name}: {}", ids.len()));
            for id in ids {
                out.push_str(&format!(" {id}"));
            }
        }
    }
    if let Some(v) = h.pp_comm {
        out.push_str(&format!(" pp_comm: {v}"));
    }
    out.push('\n');
    out.push_str(&format!("{}\n", workload.layers.len()));
    let customized = h.policy == SimaiPolicy::HybridCustomized;
    for l in &workload.layers {
        let mut fields = vec![
            word(&l.name),
            l.dep.to_string(),
            l.fwd_ns.to_string(),
            l.fwd.type_token(),
            l.fwd.bytes.to_string(),
            l.ig_ns.to_string(),
            l.ig.type_token(),
            l.ig.bytes.to_string(),
            l.wg_ns.to_string(),
            l.wg.type_token(),
            l.wg.bytes.to_string(),
            l.wg_update_ns.to_string(),
        ];
        if customized {
            fields.push(word(l.policy.as_deref().unwrap_or("NONE")));
        }
        out.push_str(&fields.join("\t"));
        out.push('\n');
    }
    out
}

/// The characters that separate tokens: C's `isspace` in the "C" locale, which SimAI's
/// `operator>>` uses (space, `\t`, `\n`, `\v`, `\f`, `\r`); other Unicode spaces belong to tokens.
fn is_separator(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r')
}

/// The tokens of a line.
fn fields(line: &str) -> impl Iterator<Item = &str> {
    line.split(is_separator).filter(|t| !t.is_empty())
}

fn is_blank(text: &str) -> bool {
    fields(text).next().is_none()
}

/// A name as one separator-free, non-empty token.
fn word(s: &str) -> String {
    if s.is_empty() {
        return "_".to_string();
    }
    s.chars()
        .map(|c| if is_separator(c) || c == '\0' { '_' } else { c })
        .collect()
}

// ---------------------------------------------------------------------------------------------

struct Cx<'a> {
    file: &'a str,
    warnings: Vec<String>,
}

impl Cx<'_> {
    fn err(&self, line: u32, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::new(
            Origin::File {
                file: self.file.to_string(),
                line,
            },
            key,
            message,
        )
    }

    fn warn(&mut self, line: u32, key: &str, message: impl Into<String>) {
        let w = self.err(line, key, message).to_string();
        self.warnings.push(w);
    }
}

/// A token as quoted in a message: at most 40 characters, control characters escaped.
fn quote(token: &str) -> String {
    const MAX: usize = 40;
    let mut out: String = token
        .chars()
        .take(MAX)
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect();
    if token.chars().nth(MAX).is_some() {
        out.push('…');
    }
    format!("`{out}`")
}

/// Why a token is not a non-negative integer.
enum NumError {
    Negative,
    NotInteger,
    TooLarge,
}

/// Reads a non-negative decimal integer (an optional `+`, digits only).
fn parse_u64(token: &str) -> Result<u64, NumError> {
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = token.strip_prefix('-') {
        if all_digits(rest) {
            return if rest.bytes().all(|b| b == b'0') {
                Ok(0)
            } else {
                Err(NumError::Negative)
            };
        }
        return Err(NumError::NotInteger);
    }
    let digits = token.strip_prefix('+').unwrap_or(token);
    if !all_digits(digits) {
        return Err(NumError::NotInteger);
    }
    digits.parse::<u64>().map_err(|_| NumError::TooLarge)
}

// --- header ----------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Tp,
    Ep,
    Pp,
    Vpp,
    Ga,
    AllGpus,
    Checkpoints,
    CheckpointInitiates,
    PpComm,
    Mode,
}

impl Key {
    const ALL: [Key; 10] = [
        Key::Tp,
        Key::Ep,
        Key::Pp,
        Key::Vpp,
        Key::Ga,
        Key::AllGpus,
        Key::Checkpoints,
        Key::CheckpointInitiates,
        Key::PpComm,
        Key::Mode,
    ];

    /// The key without its colon.
    fn name(self) -> &'static str {
        match self {
            Key::Tp => "model_parallel_NPU_group",
            Key::Ep => "ep",
            Key::Pp => "pp",
            Key::Vpp => "vpp",
            Key::Ga => "ga",
            Key::AllGpus => "all_gpus",
            Key::Checkpoints => "checkpoints",
            Key::CheckpointInitiates => "checkpoint_initiates",
            Key::PpComm => "pp_comm",
            Key::Mode => "mode",
        }
    }

    fn error_key(self) -> String {
        format!("header.{}", self.name())
    }

    /// The key a header token spells: `name:`, or `pp_comm` without colon.
    fn of_token(token: &str) -> Option<Key> {
        if token == "pp_comm" {
            return Some(Key::PpComm);
        }
        let name = token.strip_suffix(':')?;
        Key::ALL.into_iter().find(|k| k.name() == name)
    }

    /// What the value is, for messages.
    fn what(self) -> &'static str {
        match self {
            Key::Tp => "the tensor-parallel size, a positive integer",
            Key::Ep => "the expert-parallel size, a positive integer",
            Key::Pp => "the pipeline-parallel size, a positive integer",
            Key::Vpp => "a non-negative integer (AICB writes the layers per pipeline stage)",
            Key::Ga => "the gradient-accumulation steps, a positive integer",
            Key::AllGpus => "the number of GPUs, a positive integer",
            Key::Checkpoints | Key::CheckpointInitiates => {
                "a count followed by that many layer ids"
            }
            Key::PpComm => "the bytes sent between pipeline stages, a non-negative integer",
            Key::Mode => "0 (training) or 1 (inference)",
        }
    }

    /// Zero is an error for these (a zero size cannot be simulated).
    fn positive(self) -> bool {
        matches!(self, Key::Tp | Key::Pp | Key::Ga | Key::AllGpus)
    }
}

/// SimAI reads header values with `std::stoi`, which throws above this.
const STOI_MAX: u64 = i32::MAX as u64;

fn parse_header(line: &str, cx: &mut Cx<'_>) -> Result<SimaiHeader, ConfigError> {
    let tokens: Vec<&str> = fields(line).collect();
    let Some(&first) = tokens.first() else {
        return Err(cx.err(
            1,
            "header.policy",
            format!(
                "line 1 is blank; it must start with the parallelism policy, one of {}",
                policy_list()
            ),
        ));
    };
    let Some(policy) = SimaiPolicy::parse(first) else {
        let hint = if SimaiPolicy::parse(&first.to_ascii_uppercase()).is_some() {
            " (policies are upper case)"
        } else {
            ""
        };
        return Err(cx.err(
            1,
            "header.policy",
            format!(
                "unknown parallelism policy {}{hint}; valid: {}",
                quote(first),
                policy_list()
            ),
        ));
    };
    let mut h = SimaiHeader::new(policy);
    let mut seen = BTreeSet::new();
    let mut i = 1;
    while i < tokens.len() {
        let token = tokens[i];
        let Some(key) = Key::of_token(token) else {
            i += skip_unknown(&tokens, i, cx);
            continue;
        };
        if !seen.insert(key) {
            cx.warn(
                1,
                &key.error_key(),
                "given more than once; the last value is used, as in SimAI",
            );
        }
        let Some(&value) = tokens.get(i + 1) else {
            return Err(cx.err(
                1,
                &key.error_key(),
                format!(
                    "missing value after {}; expected {}",
                    quote(token),
                    key.what()
                ),
            ));
        };
        match key {
            Key::Checkpoints | Key::CheckpointInitiates => {
                let n = header_number(key, value, 0, cx)?;
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                let ids = tokens.get(i + 2..).unwrap_or_default();
                if ids.len() < n {
                    return Err(cx.err(
                        1,
                        &key.error_key(),
                        format!(
                            "announces {n} layer ids but only {} tokens follow",
                            ids.len()
                        ),
                    ));
                }
                let mut list = Vec::with_capacity(n);
                for id in &ids[..n] {
                    let v = header_number(key, id, 0, cx)?;
                    list.push(u32::try_from(v).map_err(|_| {
                        cx.err(
                            1,
                            &key.error_key(),
                            format!("layer id {} is too large", quote(id)),
                        )
                    })?);
                }
                if key == Key::Checkpoints {
                    h.checkpoints = list;
                } else {
                    h.checkpoint_initiates = list;
                }
                i += 2 + n;
            }
            Key::PpComm => {
                h.pp_comm = Some(header_number(key, value, STOI_MAX, cx)?);
                i += 2;
            }
            Key::Mode => {
                let v = header_number(key, value, 0, cx)?;
                if v > 1 {
                    return Err(cx.err(
                        1,
                        &key.error_key(),
                        format!("{} is not a mode; expected {}", quote(value), key.what()),
                    ));
                }
                h.inference = v == 1;
                i += 2;
            }
            _ => {
                let v = header_number(key, value, STOI_MAX, cx)?;
                let v = u32::try_from(v).map_err(|_| {
                    cx.err(
                        1,
                        &key.error_key(),
                        format!("{} is too large (at most {})", quote(value), u32::MAX),
                    )
                })?;
                let slot = match key {
                    Key::Tp => &mut h.tp,
                    Key::Ep => &mut h.ep,
                    Key::Pp => &mut h.pp,
                    Key::Vpp => &mut h.vpp,
                    Key::Ga => &mut h.ga,
                    _ => &mut h.all_gpus,
                };
                *slot = Some(v);
                i += 2;
            }
        }
    }
    check_header(&h, &seen, cx);
    Ok(h)
}

/// Skips a token that is no key SimAI knows; returns how many tokens to skip.
fn skip_unknown(tokens: &[&str], i: usize, cx: &mut Cx<'_>) -> usize {
    let token = tokens[i];
    if token.ends_with(':') {
        let has_value = tokens
            .get(i + 1)
            .is_some_and(|next| Key::of_token(next).is_none() && !next.ends_with(':'));
        let message = if token == "DLRM_LAST_BOTTOM_LAYER:" {
            "not kept by fleetsim (SimAI reads it only for HYBRID_DLRM and HYBRID_DLRM_ENHANCED)"
        } else {
            "unknown header key, ignored (SimAI ignores it too)"
        };
        cx.warn(
            1,
            &format!("header.{}", token.trim_end_matches(':')),
            message,
        );
        if has_value { 2 } else { 1 }
    } else {
        let glued = token
            .split_once(':')
            .and_then(|(k, _)| Key::of_token(&format!("{k}:")));
        let message = match glued {
            Some(k) => format!(
                "stray token {} ignored; SimAI reads `{}: VALUE` with a space after the colon",
                quote(token),
                k.name()
            ),
            None => format!("stray token {} ignored", quote(token)),
        };
        cx.warn(1, "header", message);
        1
    }
}

/// Reads a header number: a non-negative integer, or one written as a float with a zero
/// fraction (`6291456.0`, as AICB writes some sizes), which is accepted with a warning.
/// `stoi_limit` > 0 warns above it.
fn header_number(
    key: Key,
    value: &str,
    stoi_limit: u64,
    cx: &mut Cx<'_>,
) -> Result<u64, ConfigError> {
    let ekey = key.error_key();
    let bad = |cx: &Cx<'_>, why: &str| {
        cx.err(
            1,
            &ekey,
            format!("{} {why}; expected {}", quote(value), key.what()),
        )
    };
    let parsed = match parse_u64(value) {
        Err(NumError::NotInteger) => match value.split_once('.') {
            Some((int, frac))
                if !frac.is_empty() && frac.bytes().all(|b| b == b'0') && !int.starts_with('-') =>
            {
                let v = parse_u64(int).map_err(|_| bad(cx, "is not a number"))?;
                cx.warn(
                    1,
                    &ekey,
                    format!("{} written as a float; read as {v}", quote(value)),
                );
                Ok(v)
            }
            _ => Err(NumError::NotInteger),
        },
        other => other,
    };
    let v = match parsed {
        Ok(v) => v,
        Err(NumError::Negative) => return Err(bad(cx, "is negative")),
        Err(NumError::NotInteger) => return Err(bad(cx, "is not a number")),
        Err(NumError::TooLarge) => return Err(bad(cx, "is too large")),
    };
    if v == 0 && key.positive() {
        return Err(cx.err(
            1,
            &ekey,
            format!("must be at least 1, got 0; expected {}", key.what()),
        ));
    }
    if stoi_limit > 0 && v > stoi_limit {
        cx.warn(
            1,
            &ekey,
            format!("{v} is above {stoi_limit}, which SimAI cannot read (it uses std::stoi)"),
        );
    }
    Ok(v)
}

/// SimAI's own header warnings, and the keys it would miss.
fn check_header(h: &SimaiHeader, seen: &BTreeSet<Key>, cx: &mut Cx<'_>) {
    if h.policy.reads_header_keys() {
        for key in [Key::Tp, Key::Ep, Key::Pp, Key::Vpp, Key::Ga, Key::AllGpus] {
            if !seen.contains(&key) {
                cx.warn(
                    1,
                    &key.error_key(),
                    format!(
                        "missing; SimAI warns \"Input workload format mismatch\"; expected `{}: N`, {}",
                        key.name(),
                        key.what()
                    ),
                );
            }
        }
        let pp = h.pp.unwrap_or(1);
        match h.pp_comm {
            None if pp > 1 => cx.warn(
                1,
                "header.pp_comm",
                format!("missing with pp = {pp}; SimAI then sends 0 bytes between stages"),
            ),
            Some(0) if pp > 1 => cx.warn(
                1,
                "header.pp_comm",
                format!("0 with pp = {pp}; SimAI warns \"Input workload format mismatch\""),
            ),
            Some(v) if v > 0 && h.pp == Some(1) => cx.warn(
                1,
                "header.pp_comm",
                format!("{v} with pp = 1; SimAI warns \"Input workload format mismatch\""),
            ),
            _ => {}
        }
        for (key, v) in [(Key::Ep, h.ep), (Key::Vpp, h.vpp)] {
            if v == Some(0) {
                cx.warn(
                    1,
                    &key.error_key(),
                    "0; SimAI warns \"Input workload format mismatch\"",
                );
            }
        }
    } else if seen.iter().any(|&k| k != Key::PpComm && k != Key::Mode) {
        cx.warn(
            1,
            "header",
            format!(
                "SimAI reads model_parallel_NPU_group, ep, pp, vpp, ga, all_gpus and the \
                 checkpoints only for HYBRID_TRANSFORMER and HYBRID_TRANSFORMER_FWD_IN_BCKWD; \
                 it ignores them in a {} file",
                h.policy.token()
            ),
        );
    }
    if let (Some(tp), Some(pp), Some(all)) = (h.tp, h.pp, h.all_gpus)
        && h.dp().is_none()
    {
        cx.warn(
            1,
            "header.all_gpus",
            format!("{all} GPUs are not a multiple of TP {tp} x PP {pp}, so DP is not whole"),
        );
    }
}

fn check_checkpoints(h: &SimaiHeader, layers: usize, cx: &mut Cx<'_>) {
    for (key, ids) in [
        (Key::Checkpoints, &h.checkpoints),
        (Key::CheckpointInitiates, &h.checkpoint_initiates),
    ] {
        if let Some(id) = ids.iter().find(|&&id| u64::from(id) >= layers as u64) {
            cx.warn(
                1,
                &key.error_key(),
                format!("layer id {id} is not below the layer count {layers}"),
            );
        }
    }
}

fn policy_list() -> String {
    SimaiPolicy::ALL
        .iter()
        .map(|p| p.token())
        .collect::<Vec<_>>()
        .join(", ")
}

// --- count and layers ------------------------------------------------------------------------

fn parse_count(line: &str, n: u32, cx: &Cx<'_>) -> Result<usize, ConfigError> {
    let tokens: Vec<&str> = fields(line).collect();
    let token = match tokens.as_slice() {
        [] => {
            return Err(cx.err(
                n,
                "count",
                "missing: line 2 must hold the number of layer lines that follow the header",
            ));
        }
        [one] => *one,
        many => {
            return Err(cx.err(
                n,
                "count",
                format!(
                    "line 2 must hold only the number of layer lines, found {} tokens \
                     (is the count line missing?)",
                    many.len()
                ),
            ));
        }
    };
    let why = match parse_u64(token) {
        Ok(v) => match usize::try_from(v) {
            Ok(v) => return Ok(v),
            Err(_) => "is too large",
        },
        Err(NumError::Negative) => "is negative",
        Err(NumError::NotInteger) => "is not a number",
        Err(NumError::TooLarge) => "is too large",
    };
    Err(cx.err(
        n,
        "count",
        format!(
            "{} {why}; line 2 must hold the number of layer lines, a non-negative integer",
            quote(token)
        ),
    ))
}

fn parse_layer(
    line: &str,
    n: u32,
    customized: bool,
    cx: &mut Cx<'_>,
) -> Result<SimaiLayer, ConfigError> {
    let f: Vec<&str> = fields(line).collect();
    let want = if customized { 13 } else { 12 };
    if f.len() != want {
        let extra = if customized {
            format!(" plus the layer's `{POLICY_FIELD}` (HYBRID_CUSTOMIZED)")
        } else if f.len() == 13 {
            " (a 13th, per-layer policy column is only read in HYBRID_CUSTOMIZED files)".to_string()
        } else {
            String::new()
        };
        return Err(cx.err(
            n,
            "layer",
            format!(
                "{} fields; a layer line has {want}: {}{extra}, separated by tabs or spaces",
                f.len(),
                LAYER_FIELDS.join(" "),
            ),
        ));
    }
    let dep = f[1].parse::<i64>().map_err(|_| {
        let why = if f[1]
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'-' || b == b'+')
        {
            "does not fit in 64 bits"
        } else {
            "is not an integer"
        };
        cx.err(
            n,
            "dep",
            format!(
                "{} {why}; expected the layer's dependency (-1 in AICB files)",
                quote(f[1])
            ),
        )
    })?;
    let time = |i: usize| number(f[i], LAYER_FIELDS[i], "nanoseconds", n, cx);
    let bytes = |i: usize| number(f[i], LAYER_FIELDS[i], "bytes", n, cx);
    let comm = |i: usize| -> Result<SimaiComm, ConfigError> {
        let (kind, group) = comm_type(f[i], LAYER_FIELDS[i], n, cx)?;
        Ok(SimaiComm::new(kind, group, bytes(i + 1)?))
    };
    let layer = SimaiLayer {
        name: f[0].to_string(),
        dep,
        fwd_ns: time(2)?,
        fwd: comm(3)?,
        ig_ns: time(5)?,
        ig: comm(6)?,
        wg_ns: time(8)?,
        wg: comm(9)?,
        wg_update_ns: time(11)?,
        policy: customized.then(|| f[12].to_string()),
        line: n,
    };
    if let Some(p) = &layer.policy
        && p != "NONE"
        && SimaiPolicy::parse(p).is_none()
    {
        cx.warn(
            n,
            POLICY_FIELD,
            format!(
                "unknown policy {}; SimAI uses the file's policy for this layer",
                quote(p)
            ),
        );
    }
    Ok(layer)
}

fn number(token: &str, field: &str, unit: &str, n: u32, cx: &Cx<'_>) -> Result<u64, ConfigError> {
    let why = match parse_u64(token) {
        Ok(v) => return Ok(v),
        Err(NumError::Negative) => "is negative".to_string(),
        Err(NumError::NotInteger) => "is not an integer".to_string(),
        Err(NumError::TooLarge) => format!("does not fit in 64 bits (at most {})", u64::MAX),
    };
    Err(cx.err(
        n,
        field,
        format!(
            "{} {why}; expected a non-negative integer number of {unit}",
            quote(token)
        ),
    ))
}

fn comm_type(
    token: &str,
    field: &str,
    n: u32,
    cx: &Cx<'_>,
) -> Result<(SimaiCommKind, SimaiCommGroup), ConfigError> {
    if let Some(parsed) = SimaiComm::parse_type(token) {
        return Ok(parsed);
    }
    let valid = "valid: NONE, ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, ALLREDUCEALLTOALL, \
                 optionally suffixed _EP or _DP_EP";
    let upper = token.to_ascii_uppercase();
    let message = if SimaiComm::parse_type(&upper).is_some() {
        format!(
            "unknown communication type {} (types are upper case: `{upper}`); {valid}",
            quote(token)
        )
    } else if let Some((kind, suffix)) = SimaiCommKind::ALL
        .iter()
        .rev()
        .find_map(|k| token.strip_prefix(k.token()).map(|rest| (k, rest)))
        .filter(|(_, rest)| rest.starts_with('_'))
    {
        format!(
            "unknown group suffix {} after `{}`; {valid}",
            quote(suffix),
            kind.token()
        )
    } else {
        format!("unknown communication type {}; {valid}", quote(token))
    };
    Err(cx.err(n, field, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ep: 1 pp: 1 vpp: 8 ga: 1 all_gpus: 8 checkpoints: 0 checkpoint_initiates: 0\n2\nembedding_layer     -1 556000  ALLREDUCE   16777216      1       NONE 0        1      NONE   0      1 \nembedding_layer     -1 556000  ALLREDUCE   67108864      1       NONE 0        1      NONE   0      1 ";

    fn err(text: &str) -> String {
        match parse(text, "w.txt") {
            Ok(f) => panic!("parsed: {f:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn reads_a_small_file() {
        let f = parse(SMALL, "w.txt").unwrap();
        assert_eq!(f.header.tp, Some(8));
        assert_eq!(f.header.dp(), Some(1));
        assert_eq!(f.layers.len(), 2);
        assert_eq!(f.layers[1].line, 4);
        assert_eq!(
            f.layers[1].fwd,
            SimaiComm::new(SimaiCommKind::AllReduce, SimaiCommGroup::Default, 67108864)
        );
        assert!(f.warnings.is_empty(), "{:?}", f.warnings);
        let again = parse(&write(&f), "again.txt").unwrap();
        assert_eq!(again, f);
    }

    #[test]
    fn comm_types_with_suffixes() {
        assert_eq!(
            SimaiComm::parse_type("ALLREDUCEALLTOALL_DP_EP"),
            Some((SimaiCommKind::AllReduceAllToAll, SimaiCommGroup::DpEp))
        );
        assert_eq!(
            SimaiComm::parse_type("ALLTOALL_EP"),
            Some((SimaiCommKind::AllToAll, SimaiCommGroup::Ep))
        );
        assert_eq!(SimaiComm::parse_type("ALLREDUCE_TP"), None);
        for kind in SimaiCommKind::ALL {
            for group in [
                SimaiCommGroup::Default,
                SimaiCommGroup::Ep,
                SimaiCommGroup::DpEp,
            ] {
                let c = SimaiComm::new(kind, group, 1);
                assert_eq!(SimaiComm::parse_type(&c.type_token()), Some((kind, group)));
            }
        }
    }

    #[test]
    fn policies_round_trip() {
        for p in SimaiPolicy::ALL {
            assert_eq!(SimaiPolicy::parse(p.token()), Some(p));
        }
        assert_eq!(SimaiPolicy::parse("data"), None);
    }

    #[test]
    fn errors_name_line_and_field() {
        let bad = SMALL.replacen("ALLREDUCE", "ALLREDUC", 1);
        let e = err(&bad);
        assert!(e.starts_with("w.txt:3: `fwd_comm_type`: unknown communication type `ALLREDUC`; valid: NONE, ALLREDUCE"), "{e}");
        let e = err(&SMALL.replacen("ALLREDUCE", "ALLREDUCE_TP", 1));
        assert!(
            e.contains("w.txt:3: `fwd_comm_type`: unknown group suffix `_TP`"),
            "{e}"
        );
        let e = err(&SMALL.replacen("556000", "-5", 1));
        assert!(
            e.contains("w.txt:3: `fwd_compute_ns`: `-5` is negative"),
            "{e}"
        );
        let e = err(&SMALL.replacen("pp: 1", "pp: 0", 1));
        assert!(
            e.contains("w.txt:1: `header.pp`: must be at least 1"),
            "{e}"
        );
        let e = err(&SMALL.replacen("\n2\n", "\n3\n", 1));
        assert!(e.contains("w.txt:5: `count`: line 2 announces 3"), "{e}");
        let e = err(&SMALL.replacen("\n2\n", "\n1\n", 1));
        assert!(e.contains("w.txt:4: `count`: one layer line more"), "{e}");
        let e = err("");
        assert_eq!(e.lines().count(), 1);
        assert!(e.starts_with("w.txt: file is empty"), "{e}");
    }

    #[test]
    fn header_quirks() {
        let f = parse(
            "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 16 pp: 12 vpp: 8 ga: 24 all_gpus: 9216 checkpoints: 2 3 4 checkpoint_initiates: 1 5 pp_comm 6291456.0 mode: 1 foo: 3\n0\n\n\n",
            "h.txt",
        )
        .unwrap();
        assert_eq!(f.header.pp_comm, Some(6291456));
        assert_eq!(f.header.checkpoints, vec![3, 4]);
        assert_eq!(f.header.checkpoint_initiates, vec![5]);
        assert!(f.header.inference);
        assert_eq!(f.header.dp(), Some(384));
        let all = f.warnings.join("\n");
        assert!(
            all.contains("`header.pp_comm`: `6291456.0` written as a float"),
            "{all}"
        );
        assert!(all.contains("`header.foo`: unknown header key"), "{all}");
        let again = parse(&write(&f), "again.txt").unwrap();
        assert_eq!(again, f);
    }

    #[test]
    fn missing_keys_are_warnings() {
        let f = parse("HYBRID_TRANSFORMER_FWD_IN_BCKWD pp: 4\n0\n", "m.txt").unwrap();
        let all = f.warnings.join("\n");
        for key in [
            "model_parallel_NPU_group",
            "ep",
            "vpp",
            "ga",
            "all_gpus",
            "pp_comm",
        ] {
            assert!(
                all.contains(&format!("m.txt:1: `header.{key}`: missing")),
                "{all}"
            );
        }
        let micro = parse(
            "MICRO\n1\nmicro_test\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLREDUCE\t1024\t1\n",
            "m.txt",
        )
        .unwrap();
        assert!(micro.warnings.is_empty(), "{:?}", micro.warnings);
    }

    #[test]
    fn customized_policy_column() {
        let text = "HYBRID_CUSTOMIZED\n2\na\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLREDUCE\t1024\t1\tDATA\nb -1 1 NONE 0 1 NONE 0 1 NONE 0 1 WHATEVER\n";
        let f = parse(text, "c.txt").unwrap();
        assert_eq!(f.layers[0].policy.as_deref(), Some("DATA"));
        assert_eq!(f.warnings.len(), 1, "{:?}", f.warnings);
        assert_eq!(parse(&write(&f), "c2.txt").unwrap(), f);
        let e = err("HYBRID_CUSTOMIZED\n1\na\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLREDUCE\t1024\t1\n");
        assert!(
            e.contains("w.txt:3: `layer`: 12 fields; a layer line has 13"),
            "{e}"
        );
    }

    #[test]
    fn binary_and_non_utf8() {
        let e = parse_bytes(b"\xff\xfe\x00garbage", "b.bin")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("b.bin: file is binary"), "{e}");
        let e = parse_bytes(b"DATA\n1\nna\xefve", "b.txt")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("b.txt: file is not UTF-8 text (invalid byte 0xEF at offset 9)"),
            "{e}"
        );
    }

    #[test]
    fn write_sanitizes_names() {
        let mut f = SimaiFile {
            header: SimaiHeader::new(SimaiPolicy::Data),
            layers: vec![SimaiLayer::new("a b"), SimaiLayer::new("")],
            warnings: Vec::new(),
        };
        let text = write(&f);
        assert_eq!(
            text,
            "DATA\n2\na_b\t-1\t0\tNONE\t0\t0\tNONE\t0\t0\tNONE\t0\t0\n_\t-1\t0\tNONE\t0\t0\tNONE\t0\t0\tNONE\t0\t0\n"
        );
        f.layers[0].name = "a_b".into();
        f.layers[1].name = "_".into();
        assert_eq!(parse(&text, "s.txt").unwrap(), f);
    }
}
