//! Writing files so that a crash never leaves half of one.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;

/// The one atomic replacement of a file (checkpoint parts and manifests, Slurm rendezvous
/// and token files): `tempfile` creates the temporary beside `path` with `mode` (Unix
/// permissions), then it is synced and persisted over `path`, and the directory synced so
/// that the rename itself survives a crash.
pub fn replace_file(
    path: &Path,
    mode: u32,
    write: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut builder = tempfile::Builder::new();
    builder.prefix(".fleetsim-").suffix(".tmp");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        builder.permissions(std::fs::Permissions::from_mode(mode));
    }
    #[cfg(not(unix))]
    let _ = mode;
    let temporary = builder.tempfile_in(dir)?;
    let (file, temporary_path) = temporary.into_parts();
    let mut out = BufWriter::with_capacity(1 << 20, file);
    write(&mut out)?;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    drop(file);
    temporary_path.persist(path).map_err(|e| e.error)?;
    // Not every file system lets a directory be synced.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
