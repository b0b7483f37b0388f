//! Template tests: the `*.test.yaml` format ([`file`]), reading and checking a test file
//! ([`load`]), running its cases ([`run`]) and comparing what they expect ([`compare`]).

pub mod compare;
pub mod file;
pub mod load;
pub mod run;

/// Whether `path` names a test file (`*.test.yaml` or `*.test.yml`), which template loaders
/// skip and the test runner reads.
pub use colloquy_policy::compiler::is_test_file;

use std::path::{Path, PathBuf};

/// Folders a search for test files skips: build outputs and hidden folders.
const SKIPPED_FOLDERS: &[&str] = &["target", "node_modules"];

/// The test files at `paths`: each file as given, each directory searched (with its
/// subdirectories, but build outputs and hidden ones) for `*.test.yaml`, sorted within it.
pub fn find_test_files(paths: &[PathBuf]) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            search(path, &mut files)?;
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

fn search(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or("");
            if !name.starts_with('.') && !SKIPPED_FOLDERS.contains(&name) {
                search(&path, files)?;
            }
        } else if is_test_file(&path) {
            files.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
