//! The on-disk AOT cache: compiled modules as files named by the module's SHA-256 and the
//! engine's `precompile_compatibility_hash()`, so a restart (or a second engine with the same
//! settings) skips Cranelift, and a wasmtime upgrade or a config change misses cleanly.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use colloquy_policy::compiled::HookModule;
use wasmtime::component::Component;
use wasmtime::{Engine, Module};

use super::HookFailure;

/// Compiles `source`, through the cache when there is one. Cache trouble (an unwritable
/// directory, a stale file) is logged and never fails the hook: compiling works without it.
pub fn compile<C: Compiled>(
    engine: &Engine,
    source: &HookModule,
    cache_dir: Option<&Path>,
) -> Result<C, HookFailure> {
    let Some(dir) = cache_dir else {
        return compile_now(engine, source);
    };
    if !private_dir(dir) {
        tracing::warn!(
            dir = %dir.display(),
            "hook AOT cache skipped: the directory must belong to this user and be writable \
             by no one else, since its files are loaded as native code"
        );
        return compile_now(engine, source);
    }
    let path = cache_path(engine, dir, &source.sha256);
    if path.is_file() {
        match load(engine, &path) {
            Ok(module) => {
                tracing::debug!(path = %path.display(), "hook module read from the AOT cache");
                return Ok(module);
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "unusable AOT cache file; recompiling");
            }
        }
    }
    let module = compile_now(engine, source)?;
    if let Err(error) = store(&module, &path) {
        tracing::warn!(dir = %dir.display(), %error, "cannot write the hook AOT cache");
    }
    Ok(module)
}

/// Whether `dir` may hold files this process loads as native code: a directory owned by
/// this process's user that group and others cannot write to. Created (mode 0700) when
/// missing. A shared or foreign directory (say, a world-writable one in `/tmp`) could hand
/// the engine planted machine code, so it is not used.
fn private_dir(dir: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        if !dir.exists() {
            // A failure shows in the checks below.
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir);
        }
        // `/proc/self` belongs to the process's effective user.
        let (Ok(meta), Ok(me)) = (std::fs::metadata(dir), std::fs::metadata("/proc/self")) else {
            return false;
        };
        meta.is_dir() && meta.uid() == me.uid() && meta.permissions().mode() & 0o022 == 0
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        false
    }
}

fn compile_now<C: Compiled>(engine: &Engine, source: &HookModule) -> Result<C, HookFailure> {
    C::compile(engine, &source.bytes).map_err(|error| HookFailure::Compile(format!("{error:#}")))
}

/// What the cache holds: a core module or a component, compiled. Both share the directory:
/// a file is named by its hook file's hash, which fixes the hook's form.
pub trait Compiled: Sized {
    /// Compiles wasm bytes.
    fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Self>;
    /// Reads a file [`Compiled::serialize`] wrote.
    ///
    /// # Safety
    /// As `Module::deserialize_file`: the file must be wasmtime's own output.
    #[allow(
        unsafe_code,
        reason = "wraps wasmtime's unsafe deserialisation, with its contract"
    )]
    unsafe fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Self>;
    /// The compiled form, as bytes.
    fn serialize(&self) -> wasmtime::Result<Vec<u8>>;
}

impl Compiled for Module {
    fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Module> {
        Module::new(engine, bytes)
    }

    #[allow(unsafe_code)]
    unsafe fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Module> {
        // SAFETY: passed on from the caller.
        unsafe { Module::deserialize_file(engine, path) }
    }

    fn serialize(&self) -> wasmtime::Result<Vec<u8>> {
        Module::serialize(self)
    }
}

impl Compiled for Component {
    fn compile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
        Component::new(engine, bytes)
    }

    #[allow(unsafe_code)]
    unsafe fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
        // SAFETY: passed on from the caller.
        unsafe { Component::deserialize_file(engine, path) }
    }

    fn serialize(&self) -> wasmtime::Result<Vec<u8>> {
        Component::serialize(self)
    }
}

/// `<dir>/<module sha256>-<compatibility hash>.cwasm`.
fn cache_path(engine: &Engine, dir: &Path, module_sha256: &str) -> PathBuf {
    // `DefaultHasher::new()` has fixed keys: the same engine settings give the same name
    // across runs of one build; another Rust or wasmtime version at worst misses the cache.
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    dir.join(format!("{module_sha256}-{:016x}.cwasm", hasher.finish()))
}

/// Loads a cached compiled module.
#[allow(unsafe_code)]
fn load<C: Compiled>(engine: &Engine, path: &Path) -> wasmtime::Result<C> {
    // SAFETY: `deserialize_file` trusts the file to be wasmtime's own output for a
    // compatible engine. Files here are written only by `store` below (to a temporary name,
    // then renamed, so a reader never sees half a file), their name carries the engine's
    // compatibility hash, and wasmtime itself re-checks the header's version and settings.
    // The directory is private to this user (`private_dir`, checked before every use).
    unsafe { C::deserialize_file(engine, path) }
}

/// Writes a compiled module into the (private, existing) cache directory.
fn store<C: Compiled>(module: &C, path: &Path) -> Result<(), String> {
    let bytes = module.serialize().map_err(|error| error.to_string())?;
    // Unique per process and write: two threads may compile the same module at once.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let write = WRITES.fetch_add(1, Ordering::Relaxed);
    let temporary = path.with_extension(format!("tmp-{}-{write}", std::process::id()));
    std::fs::write(&temporary, bytes).map_err(|error| error.to_string())?;
    std::fs::rename(&temporary, path).map_err(|error| error.to_string())
}
