//! A template's hook: the module file it names (inside the template's directory, a real
//! wasm binary, not too large) and the events it runs at.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use colloquy_protocol::template::HookSpec;
use sha2::{Digest, Sha256};

use crate::compiled::HookModule;

use super::*;

impl Resolver<'_> {
    /// Checks the hook section and reads its module (when the template has a file origin).
    pub(super) fn hooks(&mut self, hooks: &HookSpec) -> Option<Arc<HookModule>> {
        if !hooks.module.ends_with(".wasm") {
            self.error(
                "spec.hooks.module",
                format!("hook module `{}` is not a .wasm file", hooks.module),
                Some(
                    "point `module` at a hook: a core wasm module or a component (`*.wasm`)".into(),
                ),
            );
        }
        let inside = module_path_inside(&hooks.module);
        if inside.is_none() {
            self.error(
                "spec.hooks.module",
                format!(
                    "hook module `{}` is outside the template's directory",
                    hooks.module
                ),
                Some(
                    "name a file in the template's directory or below it, without `..` and \
                     not absolute: a template is served, uploaded and mirrored with its module"
                        .into(),
                ),
            );
        }
        let module = self.origin.zip(inside).and_then(|(origin, inside)| {
            let resolved = origin.parent().unwrap_or(Path::new("")).join(inside);
            self.hook_module(&hooks.module, resolved)
        });
        if hooks.events.is_empty() {
            self.error(
                "spec.hooks.events",
                "no events listed, so the hook never runs",
                Some("list any of on_start, on_message, on_timeout".into()),
            );
        }
        let mut seen = HashSet::new();
        for (index, event) in hooks.events.iter().enumerate() {
            if !seen.insert(*event) {
                self.error(
                    format!("spec.hooks.events[{index}]"),
                    format!("event `{}` is listed twice", event_name(*event)),
                    None,
                );
            }
        }
        let memory = hooks.limits.memory_bytes;
        if !(MIN_HOOK_MEMORY_BYTES..=MAX_HOOK_MEMORY_BYTES).contains(&memory) {
            self.error(
                "spec.hooks.limits.memory_bytes",
                format!("memory_bytes {memory} is out of range"),
                Some(format!(
                    "between {MIN_HOOK_MEMORY_BYTES} (one 64 KiB wasm page) and \
                     {MAX_HOOK_MEMORY_BYTES} (4 GiB)"
                )),
            );
        }
        let timeout = hooks.limits.timeout_ms;
        let ceiling = self.max_hook_timeout_ms;
        if !(1..=ceiling).contains(&timeout) {
            let hint = if timeout > ceiling && ceiling < MAX_HOOK_TIMEOUT_MS {
                format!(
                    "between 1 and {ceiling}, this server's ceiling (the operator may raise it \
                     up to {MAX_HOOK_TIMEOUT_MS} with --max-hook-timeout-ms)"
                )
            } else {
                format!("between 1 and {ceiling}")
            };
            self.error(
                "spec.hooks.limits.timeout_ms",
                format!("timeout_ms {timeout} is out of range"),
                Some(hint),
            );
        }
        module
    }

    /// Reads a hook module and checks its framing: a file, not too large, a core module.
    pub(super) fn hook_module(
        &mut self,
        written: &str,
        resolved: PathBuf,
    ) -> Option<Arc<HookModule>> {
        let path = "spec.hooks.module";
        let size = match std::fs::metadata(&resolved) {
            Ok(meta) if meta.is_file() => meta.len(),
            _ => {
                let hint = format!(
                    "resolved to {} (relative to the template's directory)",
                    resolved.display()
                );
                self.error(
                    path,
                    format!("hook module `{written}` not found"),
                    Some(hint),
                );
                return None;
            }
        };
        if size > MAX_HOOK_MODULE_BYTES {
            self.error(
                path,
                format!("hook module `{written}` is {size} bytes"),
                Some(format!("modules are at most {MAX_HOOK_MODULE_BYTES} bytes")),
            );
            return None;
        }
        let bytes = match std::fs::read(&resolved) {
            Ok(bytes) => bytes,
            Err(error) => {
                self.error(
                    path,
                    format!("cannot read hook module `{written}`: {error}"),
                    None,
                );
                return None;
            }
        };
        if !is_hook_binary(&bytes) {
            let hint = if bytes.starts_with(&WASM_MAGIC) {
                "an unknown wasm binary version: a hook is a core module (ABI v1) or a \
                 component of the `colloquy:hooks@1.0.0` world (see docs/hook-abi.md)"
            } else {
                "the file does not start with the wasm magic bytes `\\0asm`"
            };
            self.error(
                path,
                format!("hook module `{written}` is not a wasm module or component"),
                Some(hint.into()),
            );
            return None;
        }
        let digest = Sha256::digest(&bytes);
        let sha256: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
        Some(Arc::new(HookModule {
            path: resolved,
            bytes: Arc::from(bytes),
            sha256: Arc::from(sha256),
        }))
    }
}
