//! The template directory's files: valid names for templates and hook modules, and
//! writing a file so readers never see half of it.

use std::fs;
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{ChangeError, MAX_TEMPLATE_NAME_LEN};

/// The first bytes of every wasm binary.
pub(super) const WASM_MAGIC: &[u8] = b"\0asm";

/// An uploaded module's file name: a plain `*.wasm` name inside the directory.
pub fn check_module_name(file: &str) -> Result<(), ChangeError> {
    let stem = file.strip_suffix(".wasm").unwrap_or_default();
    let valid = !stem.is_empty()
        && file.len() <= MAX_TEMPLATE_NAME_LEN
        && !file.starts_with('.')
        && stem
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(ChangeError::InvalidModule(format!(
            "`{file}` is not a module file name: use `NAME.wasm` with up to \
             {MAX_TEMPLATE_NAME_LEN} characters of A-Z a-z 0-9 - _ ., not starting with `.`"
        )))
    }
}

/// Whether `name` can name a template in a URL and a file: 1 to [`MAX_TEMPLATE_NAME_LEN`]
/// characters of `A-Z a-z 0-9 - _ .`, not starting with `.`.
pub fn check_name(name: &str) -> Result<(), ChangeError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_TEMPLATE_NAME_LEN
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(ChangeError::InvalidName(name.to_owned()))
    }
}

pub(super) fn read_if_exists(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Writes `bytes` to `path` so readers see the old file or the new one, never part of it:
/// a temporary file in the same directory (hidden, not `*.yaml`, so a reload meanwhile
/// ignores it), flushed to disk, then renamed over `path`.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(
        ".{file_name}.{}-{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut file = fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}
