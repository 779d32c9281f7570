//! Measured kernel tables: the role of SimAI-CP's operation database (SimAI, NSDI'25 §4.2).
//!
//! A table is a CSV written by `tools/profile_kernels.py` (or by hand), one row per measured
//! kernel, keyed by GPU, data type, kernel name, pass and shape:
//!
//! ```text
//! gpu,dtype,kernel,pass,shape,flops,bytes,time_us,source
//! H100-SXM,bf16,mlp_up,fwd,gemm:m=8192;n=28672;k=8192;batch=1,3848290697216,...,5210.4,profile_kernels.py ...
//! ```
//!
//! Shapes are written `gemm:m=;n=;k=;batch=`,
//! `attention:batch=;heads=;kv_heads=;seq_q=;seq_kv=;head_dim=;causal=;flash=` or
//! `elementwise:elements=`. Lines starting with `#` are comments; spaces around fields are
//! ignored. Fields are standard CSV: one that holds a comma is quoted (`"a, b"`), with any
//! quote inside doubled. `fleetsim workload EXP --export kernels` writes a template in this format with
//! the model's times, listing exactly the kernels the experiment runs.
//!
//! When a GPU has no row for a kernel, a row of another GPU of the same vendor and
//! architecture family is scaled as SimAI-CP-Model does: by the dense-FLOPS ratio when the
//! kernel is compute-bound on the measured GPU, by the HBM-bandwidth ratio when it is
//! memory-bound (arithmetic intensity against the measured GPU's ridge point).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;

use crate::config::{ConfigError, Origin, Precision};
use crate::gpu::{ClockState, GpuSpec};
use crate::time::SimTime;
use crate::workload::{Kernel, KernelName, Pass, Shape};

use super::{TimeSource, executed_flops};

/// The header every table starts with.
pub const HEADER: &str = "gpu,dtype,kernel,pass,shape,flops,bytes,time_us,source";
const COLUMNS: [&str; 9] = [
    "gpu", "dtype", "kernel", "pass", "shape", "flops", "bytes", "time_us", "source",
];

/// `(gpu, dtype, kernel, pass, shape key)`.
type RowKey = (String, Precision, KernelName, Pass, String);

#[derive(Debug, Clone, PartialEq)]
struct Row {
    flops: u64,
    bytes: u64,
    time: SimTime,
}

/// One data line as written. The fields stay text: each column's own parse gives its own
/// message (and csv's integer parsing would also take `0x` hex).
#[derive(Debug, Deserialize)]
struct TableRow<'a> {
    gpu: &'a str,
    dtype: &'a str,
    kernel: &'a str,
    pass: &'a str,
    shape: &'a str,
    flops: &'a str,
    bytes: &'a str,
    time_us: &'a str,
    /// Where the time came from: for people, not read.
    _source: &'a str,
}

/// Every measured row of an experiment's tables, with the GPUs they were measured on.
#[derive(Debug, Clone, Default)]
pub struct KernelTables {
    rows: BTreeMap<RowKey, Row>,
    gpus: BTreeMap<String, GpuSpec>,
}

/// The canonical text of a shape, as the table's `shape` column writes it.
pub fn shape_key(shape: &Shape) -> String {
    match *shape {
        // A measured table row is the GEMM alone: the scale swizzles before it are added
        // by the model (`with_scale_swizzles`), not keyed.
        Shape::Gemm {
            m,
            n,
            k,
            batch,
            comm_sms,
            ..
        } => format!(
            "gemm:m={m};n={n};k={k};batch={batch}{}",
            // Written only when set, so tables of GEMMs on every SM keep their keys.
            if comm_sms > 0 {
                format!(";comm_sms={comm_sms}")
            } else {
                String::new()
            }
        ),
        Shape::Attention {
            batch,
            heads,
            kv_heads,
            seq_q,
            seq_kv,
            head_dim,
            causal,
            flash,
            dropout,
        } => format!(
            "attention:batch={batch};heads={heads};kv_heads={kv_heads};seq_q={seq_q};\
             seq_kv={seq_kv};head_dim={head_dim};causal={causal};flash={flash}{}",
            // Written only when set, so tables of kernels without dropout keep their keys.
            if dropout { ";dropout=true" } else { "" }
        ),
        // `kernels` is written only above 1, so tables of fused kernels keep their keys.
        Shape::Elementwise { elements, kernels } if kernels > 1 => {
            format!("elementwise:elements={elements};kernels={kernels}")
        }
        Shape::Elementwise { elements, .. } => format!("elementwise:elements={elements}"),
        Shape::Fixed { ns } => format!("fixed:ns={ns}"),
    }
}

/// What is wrong with a `shape` column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("`{text}` is not KIND:FIELDS (gemm, attention, elementwise)")]
    NotKindAndFields { text: String },
    #[error("unknown shape kind `{kind}` (expected gemm, attention or elementwise)")]
    UnknownKind { kind: String },
    /// The fields are not the kind's, in its order; `written` is how they are written.
    #[error("`{text}`: {kind} shapes are written {written}")]
    Fields {
        text: String,
        kind: &'static str,
        written: String,
    },
    #[error("`{name}={value}` must be a positive integer")]
    NotPositive { name: String, value: String },
    #[error("`{name}={value}` must be true or false")]
    NotBool { name: String, value: String },
}

/// Parses a `shape` column; the error says what was expected.
pub fn parse_shape(text: &str) -> Result<Shape, ShapeError> {
    let (kind, fields) = text
        .split_once(':')
        .ok_or_else(|| ShapeError::NotKindAndFields { text: text.into() })?;
    let (kind, expected): (&'static str, &[&str]) = match kind {
        "gemm" => ("gemm", &["m", "n", "k", "batch"]),
        "attention" => (
            "attention",
            &[
                "batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "causal", "flash",
            ],
        ),
        "elementwise" => ("elementwise", &["elements"]),
        other => return Err(ShapeError::UnknownKind { kind: other.into() }),
    };
    let pairs: Vec<(&str, &str)> = fields
        .split(';')
        .map(|f| f.split_once('=').unwrap_or((f, "")))
        .collect();
    let mut names: Vec<&str> = pairs.iter().map(|p| p.0).collect();
    // Attention's `dropout` and a GEMM's `comm_sms` are optional, last, and off when absent.
    let optional = match kind {
        "attention" => "dropout",
        "elementwise" => "kernels",
        _ => "comm_sms",
    };
    let has_optional = names.len() == expected.len() + 1 && names.last() == Some(&optional);
    if has_optional {
        names.pop();
    }
    if names != expected {
        return Err(ShapeError::Fields {
            text: text.into(),
            kind,
            written: format!(
                "{kind}:{}{}",
                expected
                    .iter()
                    .map(|f| format!("{f}=…"))
                    .collect::<Vec<_>>()
                    .join(";"),
                match kind {
                    "attention" => ", then optionally ;dropout=true",
                    "gemm" => ", then optionally ;comm_sms=…",
                    _ => ", then optionally ;kernels=…",
                }
            ),
        });
    }
    let num = |i: usize| -> Result<u64, ShapeError> {
        let (name, v) = pairs[i];
        match v.parse::<u64>() {
            Ok(x) if x > 0 => Ok(x),
            _ => Err(ShapeError::NotPositive {
                name: name.into(),
                value: v.into(),
            }),
        }
    };
    let flag = |i: usize| -> Result<bool, ShapeError> {
        let (name, v) = pairs[i];
        v.parse::<bool>().map_err(|_| ShapeError::NotBool {
            name: name.into(),
            value: v.into(),
        })
    };
    // The optional last field, a count (`comm_sms`, `kernels`), or `absent` without it.
    let optional_count = |i: usize, absent: u32| -> Result<u32, ShapeError> {
        if !has_optional {
            return Ok(absent);
        }
        u32::try_from(num(i)?).map_err(|_| ShapeError::NotPositive {
            name: pairs[i].0.into(),
            value: pairs[i].1.into(),
        })
    };
    Ok(match kind {
        "gemm" => Shape::Gemm {
            m: num(0)?,
            n: num(1)?,
            k: num(2)?,
            batch: num(3)?,
            comm_sms: optional_count(4, 0)?,
            scale_swizzles: 0,
        },
        "attention" => Shape::Attention {
            batch: num(0)?,
            heads: num(1)?,
            kv_heads: num(2)?,
            seq_q: num(3)?,
            seq_kv: num(4)?,
            head_dim: num(5)?,
            causal: flag(6)?,
            flash: flag(7)?,
            dropout: has_optional && flag(8)?,
        },
        _ => Shape::Elementwise {
            elements: num(0)?,
            kernels: optional_count(1, 1)?,
        },
    })
}

impl KernelTables {
    /// Reads tables. `gpu_named` resolves a `gpu` column to a known GPU (the embedded
    /// database and the experiment's own GPU files).
    pub fn load(
        paths: &[(std::path::PathBuf, Origin)],
        gpu_named: &dyn Fn(&str) -> Option<GpuSpec>,
    ) -> Result<Self, ConfigError> {
        let mut tables = KernelTables::default();
        for (path, written_at) in paths {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ConfigError::new(
                    written_at.clone(),
                    "compute.kernel_tables",
                    format!(
                        "cannot read kernel table {}: {e} (paths are relative to the experiment file)",
                        path.display()
                    ),
                )
            })?;
            tables.add_text(path, &text, gpu_named)?;
        }
        Ok(tables)
    }

    /// Adds the rows of one table's text; `path` names it in errors.
    pub fn add_text(
        &mut self,
        path: &Path,
        text: &str,
        gpu_named: &dyn Fn(&str) -> Option<GpuSpec>,
    ) -> Result<(), ConfigError> {
        let file = path.display().to_string();
        let at = |line: usize, column: &str, msg: String| {
            ConfigError::new(
                Origin::File {
                    file: file.clone(),
                    line: line as u32,
                },
                column,
                msg,
            )
        };
        let mut reader = csv::ReaderBuilder::new()
            // The header is checked here, against the exact columns, with its line.
            .has_headers(false)
            // So is each row's field count.
            .flexible(true)
            .comment(Some(b'#'))
            // Lines end at `\n` only (a `\r` before it is trimmed), as tools/profile_kernels.py
            // reads them, so both name the same line.
            .terminator(csv::Terminator::Any(b'\n'))
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let mut header_seen = false;
        let mut record = csv::StringRecord::new();
        loop {
            let more = reader.read_record(&mut record).map_err(|e| {
                let line = e
                    .position()
                    .map_or(0, |p| crate::csv_line::record_line(text, p));
                at(line as usize, "", e.to_string())
            })?;
            if !more {
                break;
            }
            let line = record
                .position()
                .map_or(0, |p| crate::csv_line::record_line(text, p))
                as usize;
            // A line of spaces, or a comment indented past the first byte (csv only sees `#`
            // there): both were skipped before the table was read with csv.
            let blank = record.len() == 1 && record.get(0) == Some("");
            if blank || record.get(0).is_some_and(|f| f.starts_with('#')) {
                continue;
            }
            if !header_seen {
                if !record.iter().eq(COLUMNS) {
                    let got = record.iter().collect::<Vec<_>>().join(",");
                    return Err(at(
                        line,
                        "",
                        format!("the header must be `{HEADER}`, got `{got}`"),
                    ));
                }
                header_seen = true;
                continue;
            }
            if record.len() != COLUMNS.len() {
                return Err(at(
                    line,
                    "",
                    format!(
                        "expected {} comma-separated fields ({HEADER}), got {}{}",
                        COLUMNS.len(),
                        record.len(),
                        if record.len() > COLUMNS.len() {
                            " (quote a field that holds a comma)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            let row: TableRow = record
                .deserialize(None)
                .map_err(|e| at(line, "", e.to_string()))?;
            let gpu = gpu_named(row.gpu).ok_or_else(|| {
                at(
                    line,
                    "gpu",
                    format!(
                        "unknown GPU `{}`: use a name from configs/gpus/ or the experiment's GPU file",
                        row.gpu
                    ),
                )
            })?;
            let dtype = Precision::from_name(row.dtype).ok_or_else(|| {
                at(
                    line,
                    "dtype",
                    format!(
                        "unknown data type `{}` (expected one of {})",
                        row.dtype,
                        Precision::ALL.map(Precision::name).join(", ")
                    ),
                )
            })?;
            let kernel = KernelName::from_name(row.kernel)
                .filter(|k| *k != KernelName::Imported)
                .ok_or_else(|| {
                    at(
                        line,
                        "kernel",
                        format!(
                            "unknown kernel `{}` (expected one of {})",
                            row.kernel,
                            KernelName::ALL[..KernelName::ALL.len() - 1]
                                .iter()
                                .map(|k| k.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                })?;
            let pass = Pass::from_name(row.pass).ok_or_else(|| {
                at(
                    line,
                    "pass",
                    format!(
                        "unknown pass `{}` (expected one of {})",
                        row.pass,
                        Pass::ALL.map(Pass::name).join(", ")
                    ),
                )
            })?;
            let shape = parse_shape(row.shape).map_err(|e| at(line, "shape", e.to_string()))?;
            let count = |column: &str, value: &str| {
                value.parse::<u64>().map_err(|_| {
                    at(
                        line,
                        column,
                        format!("`{value}` must be a non-negative integer"),
                    )
                })
            };
            let (flops, bytes) = (count("flops", row.flops)?, count("bytes", row.bytes)?);
            let time_us: f64 = row
                .time_us
                .parse()
                .ok()
                .filter(|t: &f64| t.is_finite() && *t > 0.0)
                .ok_or_else(|| {
                    at(
                        line,
                        "time_us",
                        format!(
                            "`{}` must be a positive number of microseconds",
                            row.time_us
                        ),
                    )
                })?;
            let key = (gpu.name.clone(), dtype, kernel, pass, shape_key(&shape));
            let row = Row {
                flops,
                bytes,
                time: SimTime::from_micros_f64(time_us),
            };
            if self.rows.contains_key(&key) {
                return Err(at(
                    line,
                    "",
                    format!(
                        "duplicate row for {} {} {} {} {}: keep one measurement per kernel",
                        key.0,
                        dtype.name(),
                        kernel.name(),
                        pass.name(),
                        key.4
                    ),
                ));
            }
            self.rows.insert(key, row);
            self.gpus.insert(gpu.name.clone(), gpu);
        }
        if !header_seen {
            return Err(ConfigError::at_file(
                &file,
                format!("has no header: a kernel table starts with `{HEADER}`"),
            ));
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Every measured row as the kernel it times, its GPU and its time in seconds, in key
    /// order.
    pub fn measured(&self) -> impl Iterator<Item = (&GpuSpec, Kernel, f64)> + '_ {
        self.rows
            .iter()
            .filter_map(|((gpu, dtype, name, pass, shape), row)| {
                let kernel = Kernel {
                    name: *name,
                    pass: *pass,
                    shape: parse_shape(shape).ok()?,
                    flops: row.flops,
                    bytes: row.bytes,
                    dtype: *dtype,
                };
                Some((self.gpus.get(gpu)?, kernel, row.time.as_secs_f64()))
            })
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// The measured (or family-scaled) duration of `kernel` on `gpu`.
    pub fn lookup(&self, kernel: &Kernel, gpu: &GpuSpec) -> Option<(SimTime, TimeSource)> {
        if self.rows.is_empty() {
            return None;
        }
        let shape = shape_key(&kernel.shape);
        let key = |g: &str| {
            (
                g.to_string(),
                kernel.dtype,
                kernel.name,
                kernel.pass,
                shape.clone(),
            )
        };
        if let Some(row) = self.rows.get(&key(&gpu.name)) {
            return Some((row.time, TimeSource::Measured));
        }
        // The first GPU (by name) of the same vendor and family that measured this kernel.
        let (base, row) = self
            .gpus
            .values()
            .filter(|g| g.vendor == gpu.vendor && g.architecture == gpu.architecture)
            .find_map(|g| self.rows.get(&key(&g.name)).map(|r| (g, r)))?;
        Some((
            scale(row, kernel, base, gpu),
            TimeSource::Scaled {
                from: base.name.clone(),
            },
        ))
    }
}

/// SimAI-CP-Model's scaling of a measured kernel to another GPU of its family.
fn scale(row: &Row, kernel: &Kernel, base: &GpuSpec, target: &GpuSpec) -> SimTime {
    let base_peak = base.peak_flops(kernel.dtype);
    let target_peak = target.peak_flops(kernel.dtype);
    let base_bw = base.hbm.bandwidth_tb_s;
    let flops = executed_flops(&Kernel {
        flops: row.flops,
        ..*kernel
    });
    let intensity = if row.bytes == 0 {
        f64::INFINITY
    } else {
        flops / row.bytes as f64
    };
    let ridge = base_peak / (base_bw * 1e12);
    // Compute-bound work also follows the sustained clocks, where both files give them.
    let clocks = match (
        base.clock_fraction(ClockState::Sustained, kernel.dtype),
        target.clock_fraction(ClockState::Sustained, kernel.dtype),
    ) {
        (Some(b), Some(t)) => b / t,
        _ => 1.0,
    };
    let ratio = if intensity >= ridge && target_peak > 0.0 {
        base_peak / target_peak * clocks
    } else {
        base_bw / target.hbm.bandwidth_tb_s
    };
    SimTime::from_ps((row.time.as_ps() as f64 * ratio).round() as u64)
}

/// Writes a table (`fleetsim workload --export kernels`): one row per
/// `(gpu, kernel, time_us, source)`; kernels repeated on a GPU are written once.
pub fn write_table<'a>(
    rows: impl IntoIterator<Item = (&'a str, &'a Kernel, f64, String)>,
) -> String {
    let mut out = String::new();
    out.push_str(HEADER);
    out.push('\n');
    let mut seen = std::collections::BTreeSet::new();
    for (gpu, k, time_us, source) in rows {
        if matches!(k.shape, Shape::Fixed { .. }) {
            continue;
        }
        let shape = shape_key(&k.shape);
        if !seen.insert((gpu.to_string(), k.dtype, k.name, k.pass, shape.clone())) {
            continue;
        }
        let _ = writeln!(
            out,
            "{gpu},{},{},{},{shape},{},{},{time_us:.3},{}",
            k.dtype.name(),
            k.name.name(),
            k.pass.name(),
            k.flops,
            k.bytes,
            source.replace([',', '"'], " ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::ComputeModel;
    use crate::gpu::GpuDatabase;

    fn db() -> GpuDatabase {
        GpuDatabase::embedded().unwrap()
    }

    fn tables(text: &str) -> Result<KernelTables, ConfigError> {
        let db = db();
        let mut t = KernelTables::default();
        t.add_text(Path::new("t.csv"), text, &|n| db.get(n).cloned())?;
        Ok(t)
    }

    fn gemm() -> Kernel {
        crate::compute::calibration::gemm_kernel(8192, 8192, 8192, Precision::Bf16)
    }

    fn norm() -> Kernel {
        Kernel {
            name: KernelName::InputNorm,
            pass: Pass::Forward,
            shape: Shape::Elementwise {
                elements: 1 << 26,
                kernels: 1,
            },
            flops: 4 << 26,
            bytes: 4 << 26,
            dtype: Precision::Bf16,
        }
    }

    #[test]
    fn shape_keys_round_trip() {
        for shape in [
            gemm().shape,
            norm().shape,
            Shape::Attention {
                batch: 1,
                heads: 8,
                kv_heads: 1,
                seq_q: 4096,
                seq_kv: 2048,
                head_dim: 128,
                causal: false,
                flash: true,
                dropout: false,
            },
            Shape::Attention {
                batch: 1,
                heads: 16,
                kv_heads: 16,
                seq_q: 4096,
                seq_kv: 4096,
                head_dim: 128,
                causal: true,
                flash: true,
                dropout: true,
            },
            Shape::Gemm {
                m: 512,
                n: 12288,
                k: 12288,
                batch: 1,
                comm_sms: 20,
                scale_swizzles: 0,
            },
            Shape::Elementwise {
                elements: 524_288,
                kernels: 47,
            },
        ] {
            assert_eq!(parse_shape(&shape_key(&shape)).unwrap(), shape);
        }
        assert_eq!(
            shape_key(&norm().shape),
            "elementwise:elements=67108864",
            "a single kernel keeps the key tables were written with"
        );
        assert_eq!(
            shape_key(&gemm().shape),
            "gemm:m=8192;n=8192;k=8192;batch=1",
            "a GEMM on every SM keeps the key tables were written with"
        );
        assert!(matches!(
            parse_shape("gemm:m=1;n=1;k=1;batch=1;dropout=true"),
            Err(ShapeError::Fields { .. })
        ));
        assert_eq!(
            parse_shape("gemm:m=1;n=0;k=1;batch=1")
                .unwrap_err()
                .to_string(),
            "`n=0` must be a positive integer"
        );
        assert_eq!(
            parse_shape("attention:batch=1;heads=1;kv_heads=1;seq_q=1;seq_kv=1;head_dim=1;causal=1;flash=true")
                .unwrap_err()
                .to_string(),
            "`causal=1` must be true or false"
        );
        assert!(matches!(
            parse_shape("conv:x=1"),
            Err(ShapeError::UnknownKind { .. })
        ));
    }

    #[test]
    fn measured_rows_override_and_family_members_scale_by_flops_or_bandwidth() {
        let db = db();
        let (h100, h800, h20, a100) = (
            db.get("H100-SXM").unwrap(),
            db.get("H800").unwrap(),
            db.get("H20").unwrap(),
            db.get("A100-SXM-80GB").unwrap(),
        );
        let (g, n) = (gemm(), norm());
        let text = write_table([
            ("H100-SXM", &g, 1000.0, "test".to_string()),
            ("H100-SXM", &n, 200.0, "test".to_string()),
        ]);
        let t = tables(&text).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t.lookup(&g, h100),
            Some((SimTime::from_ps(1_000_000_000), TimeSource::Measured))
        );
        // H800: same Hopper compute and HBM as H100, so the same times, marked as scaled.
        let (time, source) = t.lookup(&g, h800).unwrap();
        assert_eq!(time.as_ps(), 1_000_000_000);
        assert_eq!(
            source,
            TimeSource::Scaled {
                from: "H100-SXM".into()
            }
        );
        // H20: compute-bound GEMM by the FLOPS ratio, memory-bound norm by the bandwidth ratio.
        let ps = t.lookup(&g, h20).unwrap().0.as_ps();
        let want = 1e9 * h100.dense_tflops.bf16 / h20.dense_tflops.bf16;
        assert!((ps as f64 - want).abs() < 1.0, "{ps} vs {want}");
        let ps = t.lookup(&n, h20).unwrap().0.as_ps();
        let want = 2e8 * h100.hbm.bandwidth_tb_s / h20.hbm.bandwidth_tb_s;
        assert!((ps as f64 - want).abs() < 1.0, "{ps} vs {want}");
        // Another family is never scaled from Hopper; an unlisted kernel is not found.
        assert_eq!(t.lookup(&g, a100), None);
        let mut other = g;
        other.shape = Shape::Gemm {
            m: 8192,
            n: 8192,
            k: 4096,
            batch: 1,
            comm_sms: 0,
            scale_swizzles: 0,
        };
        assert_eq!(t.lookup(&other, h100), None);
        // The model falls back to the calibrated roofline and says so.
        let model = ComputeModel::new(crate::compute::EfficiencyTable::embedded().unwrap(), t);
        assert_eq!(model.kernel_time(&g, h100).source, TimeSource::Measured);
        assert_eq!(
            model.kernel_time(&g, a100).source,
            TimeSource::Model { fitted: true }
        );
        let mi300x = db.get("MI300X").unwrap();
        assert_eq!(
            model.kernel_time(&g, mi300x).source,
            TimeSource::Model { fitted: false }
        );
    }

    #[test]
    fn fields_are_standard_csv_with_comments_and_spaces() {
        let quoted = "H100-SXM, bf16 ,mlp_up,fwd,\"gemm:m=1;n=1;k=1;batch=1\",2,6,1.5,\"run 2, \"\"steady\"\"\"";
        let text = format!("# a comment\n\n  # indented\n{HEADER}\n   \n{quoted}\n");
        let t = tables(&text).unwrap();
        let (_, kernel, seconds) = t.measured().next().unwrap();
        assert_eq!(
            kernel.shape,
            parse_shape("gemm:m=1;n=1;k=1;batch=1").unwrap()
        );
        assert_eq!((kernel.flops, kernel.bytes, seconds), (2, 6, 1.5e-6));
        // An unquoted comma adds a field, and the error says to quote it.
        let err = tables(&format!("{HEADER}\n{}\n", quoted.replace('"', ""))).unwrap_err();
        assert!(
            err.message
                .ends_with("got 10 (quote a field that holds a comma)")
        );
    }

    #[test]
    fn errors_name_the_line_past_comments_and_blank_lines() {
        let row = "H100-SXM,bf16,mlp_up,fwd,gemm:m=1;n=1;k=1;batch=1,2,6,1.5,x";
        let bad = row.replace("bf16", "bf17");
        for (text, line) in [
            (format!("# c\n# \"quoted\n\n{HEADER}\r\n\r\n{bad}\r\n"), 6),
            (format!("{HEADER}\n{row}\n  # c\n\n# c\n{bad}"), 6),
            ("\n\n# header next\nbad,header\n".to_string(), 4),
        ] {
            let err = tables(&text).unwrap_err();
            assert_eq!(
                err.origin,
                Origin::File {
                    file: "t.csv".into(),
                    line
                },
                "{text:?}: {err:?}"
            );
        }
    }

    #[test]
    fn malformed_rows_name_the_line_and_column() {
        let row = "H100-SXM,bf16,mlp_up,fwd,gemm:m=1;n=1;k=1;batch=1,2,6,1.5,x";
        let err = tables(&format!("# c\n{HEADER}\n{row}\n{row}\n")).unwrap_err();
        assert_eq!(
            err.origin,
            Origin::File {
                file: "t.csv".into(),
                line: 4
            }
        );
        let err = tables(&format!("{HEADER}\n{}\n", row.replace("1.5", "0"))).unwrap_err();
        assert_eq!(err.key, "time_us");
        let err = tables(&format!(
            "{HEADER}\n{}\n",
            row.replace("mlp_up", "imported")
        ))
        .unwrap_err();
        assert_eq!(err.key, "kernel");
    }
}
