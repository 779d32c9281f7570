//! Checkpoints (DESIGN.md, "Windows and mailboxes"). One is taken at a window barrier, after
//! the batches of the window have arrived: nothing is in flight then, every pending event is in
//! a partition's queue or incoming box. Each worker writes one part file of per-LP records
//! (the LP's state, its sequence counter and the events pending for it), so a run can resume on
//! any number of workers with any partitioning: a worker reads only the records of the LPs it
//! owns and skips the others without decoding them.
//!
//! A part file: [`PART_MAGIC`], then per LP `id: u32 LE`, `length: u64 LE` and the LP's
//! bitcode-encoded [`LpRecord`]. Files are written atomically (a temporary, fsync, rename, fsync
//! of the directory); the coordinator's manifest, written last the same way, is what makes a
//! checkpoint complete.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sim_engine::{Event, Lp};
use sim_ir::event::EventKey;
use sim_models::topology::NodeId;

/// First bytes of a part file: the format and its version.
pub const PART_MAGIC: &[u8; 8] = b"FSIMLPS2";

/// One LP in a checkpoint, as read back.
#[derive(Debug, Deserialize)]
pub struct LpRecord {
    pub seq: u64,
    pub lp: Lp,
    /// Events pending for the LP, in key order.
    pub events: Vec<(EventKey, Event)>,
}

/// One LP in a checkpoint, as written: borrows what [`LpRecord`] owns (same encoding).
#[derive(Serialize)]
struct LpRecordRef<'a> {
    seq: u64,
    lp: &'a Lp,
    events: &'a [(EventKey, Event)],
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot write checkpoint file {}: {error}", path.display())]
    Write { path: PathBuf, error: io::Error },
    #[error("checkpoint file {}: {why}", path.display())]
    Read { path: PathBuf, why: String },
    #[error(
        "the checkpoint has no record of LP {lp}; it was written for another experiment or is incomplete"
    )]
    MissingLp { lp: NodeId },
}

/// The part file of `worker` in a checkpoint directory.
pub fn part_file_name(worker: u32) -> String {
    format!("worker-{worker}.lps")
}

/// Where the part files of the checkpoint taken before window `window` go.
pub fn window_dir(dir: &Path, window: u64) -> PathBuf {
    dir.join(format!("window-{window:012}"))
}

/// Writes `path` so that it either has its old content or all of the new one: into a
/// temporary beside it, fsync, rename over `path`, fsync of the directory.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> Result<(), CheckpointError> {
    crate::file::replace_file(path, 0o644, write).map_err(|error| CheckpointError::Write {
        path: path.to_path_buf(),
        error,
    })
}

/// Appends LP records to a part file being written.
#[derive(Debug)]
pub struct PartWriter<'a, W: Write> {
    out: &'a mut W,
    scratch: Vec<u8>,
    pub bytes: u64,
    pub lps: u64,
}

impl<'a, W: Write> PartWriter<'a, W> {
    pub fn new(out: &'a mut W) -> io::Result<Self> {
        out.write_all(PART_MAGIC)?;
        Ok(PartWriter {
            out,
            scratch: Vec::new(),
            bytes: PART_MAGIC.len() as u64,
            lps: 0,
        })
    }

    pub fn record(
        &mut self,
        id: NodeId,
        seq: u64,
        lp: &Lp,
        events: &[(EventKey, Event)],
    ) -> io::Result<()> {
        self.scratch = bitcode::serialize(&LpRecordRef { seq, lp, events })
            .map_err(|e| io::Error::other(format!("LP {id} cannot be encoded: {e}")))?;
        self.out.write_all(&id.to_le_bytes())?;
        self.out
            .write_all(&(self.scratch.len() as u64).to_le_bytes())?;
        self.out.write_all(&self.scratch)?;
        self.bytes += 12 + self.scratch.len() as u64;
        self.lps += 1;
        Ok(())
    }
}

/// The records of every LP `owned` accepts, from `files`, by LP id. Records of other LPs are
/// skipped unread, so memory follows what the caller owns.
pub fn read_records(
    files: &[PathBuf],
    owned: impl Fn(NodeId) -> bool,
) -> Result<Vec<(NodeId, LpRecord)>, CheckpointError> {
    let mut records = Vec::new();
    for path in files {
        let bad = |why: String| CheckpointError::Read {
            path: path.clone(),
            why,
        };
        let file = File::open(path).map_err(|e| bad(format!("cannot open it: {e}")))?;
        let size = file
            .metadata()
            .map_err(|e| bad(format!("cannot read its size: {e}")))?
            .len();
        let input = BufReader::with_capacity(1 << 20, file);
        read_part(input, size, &owned, &mut records).map_err(bad)?;
    }
    Ok(records)
}

/// Reads the records of one part file of `size` bytes from `input` into `records` (those
/// `owned` accepts). The error says what is wrong, for [`CheckpointError::Read`].
///
/// Every record's length is checked against the bytes left in the file before a buffer is
/// allocated for it, so a damaged length cannot ask for more memory than the file holds;
/// bitcode checks the lengths inside a record against the record's bytes the same way (its
/// columns pack a value into at least one bit, so what it builds is in proportion to them).
pub fn read_part<R: Read + Seek>(
    mut input: R,
    size: u64,
    owned: impl Fn(NodeId) -> bool,
    records: &mut Vec<(NodeId, LpRecord)>,
) -> Result<(), String> {
    let mut magic = [0u8; 8];
    input
        .read_exact(&mut magic)
        .map_err(|e| format!("cannot read its header: {e}"))?;
    if &magic != PART_MAGIC {
        return Err(
            "not a fleetsim checkpoint part (wrong header); point --resume at a checkpoint directory written by fleetsim"
                .into(),
        );
    }
    let mut at = PART_MAGIC.len() as u64;
    let mut head = [0u8; 12];
    loop {
        match read_full(&mut input, &mut head) {
            Ok(0) => break,
            Ok(12) => {}
            Ok(_) => return Err("it ends inside a record (truncated)".into()),
            Err(e) => return Err(format!("cannot read it: {e}")),
        }
        at += 12;
        let id = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let mut length = [0u8; 8];
        length.copy_from_slice(&head[4..]);
        let length = u64::from_le_bytes(length);
        let left = size.saturating_sub(at);
        if length > left {
            return Err(format!(
                "the record of LP {id} at byte {} says it is {length} bytes long, but only {left} remain (truncated or damaged)",
                at - 12
            ));
        }
        at += length;
        if !owned(id) {
            // Below `size`, which a file on this machine holds: fits an i64.
            let skip = i64::try_from(length)
                .map_err(|_| format!("record of LP {id} has an impossible length"))?;
            input
                .seek_relative(skip)
                .map_err(|e| format!("cannot skip LP {id}: {e}"))?;
            continue;
        }
        let length = usize::try_from(length)
            .map_err(|_| format!("record of LP {id} has an impossible length"))?;
        let mut bytes = vec![0u8; length];
        input
            .read_exact(&mut bytes)
            .map_err(|e| format!("the record of LP {id} is cut short: {e}"))?;
        let record: LpRecord = bitcode::deserialize(&bytes)
            .map_err(|e| format!("the record of LP {id} cannot be decoded: {e}"))?;
        records.push((id, record));
    }
    // A record cut short at the end reads as a clean end above only when nothing of it
    // was written; check the file was consumed exactly.
    let end = input
        .stream_position()
        .map_err(|e| format!("cannot read it: {e}"))?;
    if end != size {
        return Err(format!(
            "{size} bytes, but its records end at byte {end} (truncated)"
        ));
    }
    Ok(())
}

/// Reads until `buf` is full or the input ends; how many bytes it read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn read(bytes: &[u8]) -> Result<usize, String> {
        let mut records = Vec::new();
        read_part(
            Cursor::new(bytes),
            bytes.len() as u64,
            |_| true,
            &mut records,
        )?;
        Ok(records.len())
    }

    fn part(records: &[(u32, u64, &[u8])]) -> Vec<u8> {
        let mut bytes = PART_MAGIC.to_vec();
        for &(id, length, body) in records {
            bytes.extend(id.to_le_bytes());
            bytes.extend(length.to_le_bytes());
            bytes.extend(body);
        }
        bytes
    }

    #[test]
    fn a_part_without_records_reads_as_none() {
        assert_eq!(read(PART_MAGIC), Ok(0));
    }

    /// A damaged length is checked against the bytes left before a buffer is made for it.
    #[test]
    fn a_length_beyond_the_file_is_one_clear_error() {
        let bytes = part(&[(3, u64::MAX, b"abc")]);
        assert_eq!(
            read(&bytes).expect_err("huge length"),
            "the record of LP 3 at byte 8 says it is 18446744073709551615 bytes long, but only 3 remain (truncated or damaged)"
        );
        let bytes = part(&[(3, 4, b"abc")]);
        assert!(
            read(&bytes)
                .expect_err("one short")
                .contains("only 3 remain")
        );
        // Skipped records are checked the same way.
        let mut records = Vec::new();
        let e = read_part(
            Cursor::new(&bytes),
            bytes.len() as u64,
            |_| false,
            &mut records,
        )
        .expect_err("skip past the end");
        assert!(e.contains("only 3 remain"), "{e}");
    }

    #[test]
    fn a_cut_header_or_garbage_record_is_an_error() {
        let mut bytes = part(&[]);
        bytes.extend([1, 0, 0]);
        assert_eq!(
            read(&bytes).expect_err("cut"),
            "it ends inside a record (truncated)"
        );
        let bytes = part(&[(0, 3, b"\xff\xff\xff")]);
        assert!(
            read(&bytes)
                .expect_err("garbage")
                .starts_with("the record of LP 0 cannot be decoded"),
        );
        assert!(read(b"FSIMLPS1").expect_err("old").contains("wrong header"));
        assert!(
            read(b"FSIM")
                .expect_err("short")
                .contains("cannot read its header")
        );
    }

    /// Every input the fuzz target `checkpoint` found a problem with reads as an error or as
    /// records, without a panic (tests/fixtures/fuzz-regressions/checkpoint/).
    #[test]
    fn fuzz_regressions_read_without_a_panic() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/fuzz-regressions/checkpoint");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("the regressions folder") {
            let path = entry.expect("an entry").path();
            let bytes = std::fs::read(&path).expect("a regression input");
            let _ = read(&bytes);
            let mut records = Vec::new();
            let _ = read_part(
                Cursor::new(&bytes),
                bytes.len() as u64,
                |id| id % 2 == 0,
                &mut records,
            );
            seen += 1;
        }
        assert!(seen > 0, "no inputs in {}", dir.display());
    }
}
