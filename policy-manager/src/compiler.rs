//! The template compiler: YAML text → [`CompiledTemplate`], or every problem at once.
//!
//! A template author fixing a file should see all of its problems in one run, each with file,
//! line, column, the path inside the template and, where possible, a hint; and a bad template
//! must never take the policy manager down. So compiling runs in stages that each collect
//! instead of stopping:
//!
//! 1. `locations::Locations` indexes the YAML (path → line and column) for the later stages.
//! 2. serde reads the document into [`Template`]. serde_ignored reports *every* unknown field
//!    (the format types deliberately lack `deny_unknown_fields`, which stops at the first);
//!    a syntax or type error ends this stage with one diagnostic carrying serde's position.
//!    Actions are written as single-key maps (`- reject: {reason: x}`), which serde_norway
//!    only reads through its `singleton_map_recursive` adapter (plain serde_norway expects
//!    YAML tags such as `!reject`).
//! 3. The semantic checks in `resolve` run over the whole document, resolve names to
//!    indices and compile JSON Schemas and CEL, all into [`crate::compiled`] types.
//!
//! Submodules: `diagnostic` (the error types and their display), `nesting` and `expansion`
//! (the pre-checks), `fields` (unknown-field
//! paths and hints), `expressions` (CEL), `resolve` (the semantic checks).

mod diagnostic;
mod expansion;
mod expressions;
mod fields;
mod nesting;
mod resolve;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use colloquy_protocol::template::{Template, template_json_schema};
use serde_json::Value;

use self::diagnostic::closest;
pub use self::diagnostic::{Diagnostic, Diagnostics};
pub use self::expansion::{MAX_EXPANDED_DEPTH, MAX_EXPANDED_NODES, MAX_EXPANDED_SCALAR_BYTES};
use self::fields::{Segment, allowed_fields, render_path, segments};
pub(crate) use self::resolve::module_path_inside;
use crate::compiled::{CompiledTemplate, HookModule};
use crate::locations::Locations;

/// Stack of the thread a template compiles on. The ANTLR-generated CEL parser recurses
/// deeply: in debug builds about 15 nested parentheses already overflow a 2 MiB stack, and a
/// stack overflow aborts the process. The parser's own recursion limit (96) bounds the depth;
/// 32 MiB held every expression shape tried up to that limit, and this doubles it. Only the
/// pages actually touched are committed.
const COMPILER_STACK_BYTES: usize = 64 * 1024 * 1024;

/// The format's top-level fields: a file with none of them is not a template.
const TOP_LEVEL_FIELDS: [&str; 4] = ["apiVersion", "kind", "metadata", "spec"];

/// Hex digits of the SHA-256 kept in a revision: 64 bits tell revisions of one template apart
/// while staying short enough to read in logs and URLs.
const REVISION_HEX_DIGITS: usize = 16;

/// The longest hook budget (`spec.hooks.limits.timeout_ms`) a template may ask for unless
/// the operator raises it ([`TemplateCompiler::with_max_hook_timeout_ms`], `colloquy serve
/// --max-hook-timeout-ms`). A hook call holds its conversation (and a hook thread) for up to
/// its budget; a second is far above any real hook, whose calls take microseconds.
pub const DEFAULT_MAX_HOOK_TIMEOUT_MS: u64 = 1_000;

/// Compiles template files (or text) into [`CompiledTemplate`]s.
#[derive(Debug, Clone)]
pub struct TemplateCompiler {
    /// The JSON Schema of the format, consulted for the fields allowed where an unknown one is.
    format_schema: Value,
    /// The operator's ceiling on `spec.hooks.limits.timeout_ms`.
    max_hook_timeout_ms: u64,
}

impl Default for TemplateCompiler {
    fn default() -> TemplateCompiler {
        TemplateCompiler::new()
    }
}

impl TemplateCompiler {
    /// A compiler for template format v1.
    pub fn new() -> TemplateCompiler {
        TemplateCompiler {
            format_schema: template_json_schema(),
            max_hook_timeout_ms: DEFAULT_MAX_HOOK_TIMEOUT_MS,
        }
    }

    /// This compiler, refusing templates whose hook budget is over `ms` (at most the
    /// format's own limit of a minute, which stays the ceiling for larger values).
    pub fn with_max_hook_timeout_ms(mut self, ms: u64) -> TemplateCompiler {
        self.max_hook_timeout_ms = ms;
        self
    }

    /// The ceiling on a template's hook budget.
    pub fn max_hook_timeout_ms(&self) -> u64 {
        self.max_hook_timeout_ms
    }

    /// Compiles one template. `origin` is the file path used in diagnostics and for resolving
    /// `hooks.module` relative to the template's directory; without one, diagnostics carry no
    /// file and the hook module's existence is not checked.
    pub fn compile_str(
        &self,
        source: &str,
        origin: Option<&Path>,
    ) -> Result<CompiledTemplate, Diagnostics> {
        self.compile_with_locations(source, origin, &Locations::index(source))
            .map_err(Diagnostics::sorted)
    }

    /// Compiles a revision again from the text it was first compiled from and the hook module
    /// it was compiled with (the module's file may have changed since, which would make
    /// another revision): the live catalog keeps these, rather than the compiled form, for
    /// revisions no running conversation holds. Same revision as the first compile.
    pub fn recompile(
        &self,
        source: &str,
        origin: Option<&Path>,
        hook_module: Option<Arc<HookModule>>,
    ) -> Result<CompiledTemplate, Diagnostics> {
        // Without an origin the module is not read from disk: the one given is used.
        let mut compiled = self.compile_str(source, None)?;
        compiled.source_path = origin.map(Path::to_path_buf);
        compiled.revision = revision(source, hook_module.as_ref().map(|m| &*m.sha256));
        compiled.hook_module = hook_module;
        Ok(compiled)
    }

    /// Reads and compiles one template file.
    pub fn compile_file(&self, path: &Path) -> Result<CompiledTemplate, Diagnostics> {
        let source = read(path).map_err(|diagnostic| Diagnostics::from(vec![*diagnostic]))?;
        self.compile_str(&source, Some(path))
    }

    /// Compiles every `*.yaml` and `*.yml` file directly in `dir` (not in subdirectories),
    /// all or nothing: any problem in any file fails the whole set with the diagnostics of all
    /// files, and so does a `metadata.name` used by two files. Sorted by name.
    pub fn compile_dir(&self, dir: &Path) -> Result<Vec<CompiledTemplate>, Diagnostics> {
        let compiled = self.compile_dir_with_sources(dir)?;
        Ok(compiled.into_iter().map(|(template, _)| template).collect())
    }

    /// [`TemplateCompiler::compile_dir`], each template with the exact text it was compiled
    /// from: the policy manager serves that text, so what it serves always matches the
    /// revision (re-reading the file later could see a newer edit).
    pub fn compile_dir_with_sources(
        &self,
        dir: &Path,
    ) -> Result<Vec<(CompiledTemplate, Arc<str>)>, Diagnostics> {
        let files =
            template_files(dir).map_err(|diagnostic| Diagnostics::from(vec![*diagnostic]))?;
        let mut compiled = Vec::new();
        let mut problems = Vec::new();
        let mut first_file_of: HashMap<Arc<str>, PathBuf> = HashMap::new();
        for file in files {
            let source = match read(&file) {
                Ok(source) => source,
                Err(diagnostic) => {
                    problems.push(*diagnostic);
                    continue;
                }
            };
            let locations = Locations::index(&source);
            match self.compile_with_locations(&source, Some(&file), &locations) {
                Ok(template) => {
                    if let Some(first) = first_file_of.get(&template.name) {
                        let location = locations.nearest("metadata.name");
                        problems.push(Diagnostic {
                            file: Some(file.clone()),
                            line: location.map(|l| l.line),
                            column: location.map(|l| l.column),
                            path: "metadata.name".to_owned(),
                            message: format!(
                                "template name `{}` is already used by {}",
                                template.name,
                                first.display()
                            ),
                            hint: Some("template names must be unique within a directory".into()),
                        });
                    } else {
                        first_file_of.insert(template.name.clone(), file.clone());
                        compiled.push((template, Arc::from(source)));
                    }
                }
                Err(diagnostics) => problems.extend(diagnostics),
            }
        }
        if !problems.is_empty() {
            return Err(Diagnostics::sorted(problems));
        }
        compiled.sort_by(|(a, _), (b, _)| a.name.cmp(&b.name));
        Ok(compiled)
    }

    /// Runs [`TemplateCompiler::compile_on_this_thread`] on a thread with a stack large enough
    /// for the parsers, turning a panic into a diagnostic instead of taking the caller down.
    fn compile_with_locations(
        &self,
        source: &str,
        origin: Option<&Path>,
        locations: &Locations,
    ) -> Result<CompiledTemplate, Vec<Diagnostic>> {
        let failed = |message: String| Diagnostic {
            file: origin.map(Path::to_path_buf),
            line: None,
            column: None,
            path: String::new(),
            message,
            hint: None,
        };
        if let Some(nesting::TooDeep { line, column }) = nesting::too_deep(source) {
            return Err(vec![Diagnostic {
                line: Some(line),
                column: Some(column),
                ..failed(format!(
                    "collections nested more than {} deep; templates need a few levels",
                    nesting::MAX_FLOW_DEPTH
                ))
            }]);
        }
        if let Some(expansion::TooLarge {
            message,
            line,
            column,
        }) = expansion::too_large(source)
        {
            return Err(vec![Diagnostic {
                line: Some(line),
                column: Some(column),
                hint: Some(
                    "each alias (`*name`) repeats its anchored node in full; write smaller \
                     anchors or fewer aliases"
                        .to_owned(),
                ),
                ..failed(message)
            }]);
        }
        let outcome = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("template-compiler".to_owned())
                .stack_size(COMPILER_STACK_BYTES)
                .spawn_scoped(scope, || {
                    self.compile_on_this_thread(source, origin, locations)
                })
                .map(|handle| handle.join())
        });
        match outcome {
            Ok(Ok(result)) => result,
            Ok(Err(_panic)) => Err(vec![failed(
                "internal compiler error: the compiler panicked on this template".to_owned(),
            )]),
            Err(error) => Err(vec![failed(format!(
                "cannot start the compiler thread: {error}"
            ))]),
        }
    }

    fn compile_on_this_thread(
        &self,
        source: &str,
        origin: Option<&Path>,
        locations: &Locations,
    ) -> Result<CompiledTemplate, Vec<Diagnostic>> {
        let at = |path: String, message: String, hint: Option<String>| {
            let location = locations.nearest(&path);
            Diagnostic {
                file: origin.map(Path::to_path_buf),
                line: location.map(|l| l.line),
                column: location.map(|l| l.column),
                path,
                message,
                hint,
            }
        };
        let mut unknown_fields: Vec<Vec<Segment>> = Vec::new();
        let parsed: Result<Template, serde_norway::Error> =
            serde_norway::with::singleton_map_recursive::deserialize(
                serde_ignored::Deserializer::new(
                    serde_norway::Deserializer::from_str(source),
                    &mut |path: serde_ignored::Path<'_>| unknown_fields.push(segments(&path)),
                ),
            );
        // A file with none of the format's top-level fields is no template at all (a stray
        // file, a link to `/etc/shadow`): one sentence says so, rather than an unknown field
        // per key, each quoting a line of the file.
        let not_a_template = !unknown_fields.is_empty()
            && TOP_LEVEL_FIELDS
                .iter()
                .all(|field| locations.nearest(field).is_none());
        if not_a_template {
            unknown_fields.clear();
        }
        let mut diagnostics: Vec<Diagnostic> = unknown_fields
            .iter()
            .map(|path| {
                let (name, parent) = match path.split_last() {
                    Some((Segment::Key(name), parent)) => (name.clone(), parent),
                    _ => (render_path(path), &path[..0]),
                };
                let allowed = allowed_fields(&self.format_schema, parent);
                let hint = if allowed.is_empty() {
                    None
                } else {
                    let suggestion = closest(&name, allowed.iter().map(String::as_str))
                        .map(|close| format!("did you mean `{close}`? "))
                        .unwrap_or_default();
                    Some(format!(
                        "{suggestion}allowed fields here: {}",
                        allowed.join(", ")
                    ))
                };
                at(render_path(path), format!("unknown field `{name}`"), hint)
            })
            .collect();
        if not_a_template {
            diagnostics.push(Diagnostic {
                line: Some(1),
                column: Some(1),
                hint: Some(
                    "a template is a YAML mapping starting `apiVersion: colloquy.dev/v1`".into(),
                ),
                ..at(
                    String::new(),
                    format!(
                        "this file is not a template: it has none of the top-level fields {}",
                        TOP_LEVEL_FIELDS.join(", ")
                    ),
                    None,
                )
            });
        }
        let template = match parsed {
            Ok(template) => template,
            Err(error) => {
                diagnostics.push(serde_diagnostic(&error, origin));
                return Err(diagnostics);
            }
        };
        // Only now: had serde failed, a duplicate struct field would already be its error.
        for duplicate in locations.duplicates() {
            let key = duplicate.path.rsplit('.').next().unwrap_or(&duplicate.path);
            diagnostics.push(Diagnostic {
                file: origin.map(Path::to_path_buf),
                line: Some(duplicate.at.line),
                column: Some(duplicate.at.column),
                path: duplicate.path.clone(),
                message: format!("duplicate key `{key}`"),
                hint: Some(format!(
                    "first written at line {}; YAML keys must be unique in a mapping",
                    duplicate.first.line
                )),
            });
        }
        match resolve::resolve(template, origin, self.max_hook_timeout_ms, &at) {
            Ok(mut compiled) if diagnostics.is_empty() => {
                let module = compiled.hook_module.as_ref().map(|m| &*m.sha256);
                compiled.revision = revision(source, module);
                Ok(compiled)
            }
            Ok(_) => Err(diagnostics),
            Err(problems) => {
                diagnostics.extend(problems);
                Err(diagnostics)
            }
        }
    }
}

/// `sha256:` and the first [`REVISION_HEX_DIGITS`] hex digits of the SHA-256 of the YAML
/// followed by the hook module's SHA-256 (so rebuilding a hook makes a new revision, which
/// new conversations pick up while running ones keep theirs). The whole digest is
/// [`colloquy_trust::chain::revision_digest`]'s, which audit records carry.
fn revision(source: &str, hook_module_sha256: Option<&str>) -> Arc<str> {
    let digest = colloquy_trust::chain::revision_digest(source, hook_module_sha256);
    Arc::from(format!("sha256:{}", &digest[..REVISION_HEX_DIGITS]))
}

/// A serde_norway error as a diagnostic: its position, and the path and message it carries
/// in its text (`spec.thread.initial: invalid type: ... at line 3 column 5`).
fn serde_diagnostic(error: &serde_norway::Error, origin: Option<&Path>) -> Diagnostic {
    let location = error.location();
    let mut text = error.to_string();
    if let Some(location) = &location {
        let mark = format!(" at line {} column {}", location.line(), location.column());
        if let Some(start) = text.find(&mark) {
            text.replace_range(start..start + mark.len(), "");
        }
    }
    let (path, message) = match text.split_once(": ") {
        Some((path, message)) if !path.is_empty() && !path.contains(char::is_whitespace) => (
            path.strip_prefix('.').unwrap_or(path).to_owned(),
            message.to_owned(),
        ),
        _ => (String::new(), text),
    };
    Diagnostic {
        file: origin.map(Path::to_path_buf),
        line: location.as_ref().map(serde_norway::Location::line),
        column: location.as_ref().map(serde_norway::Location::column),
        path,
        message,
        hint: None,
    }
}

/// Largest template file read from a directory: the API's upload limit
/// (`colloquy_server::policy::MAX_TEMPLATE_BYTES`), so a watched file cannot be what an
/// upload may not (and a file that never ends, say a link to `/dev/zero`, is not read for
/// ever).
pub const MAX_SOURCE_BYTES: u64 = 1024 * 1024;

/// Reads a template file, at most [`MAX_SOURCE_BYTES`]. (Errors are boxed: a `Diagnostic`
/// is large and the happy path should not pay for it.)
fn read(path: &Path) -> Result<String, Box<Diagnostic>> {
    use std::io::Read as _;
    let failed = |message: String| {
        Box::new(Diagnostic {
            file: Some(path.to_path_buf()),
            line: None,
            column: None,
            path: String::new(),
            message,
            hint: None,
        })
    };
    let mut text = String::new();
    fs::File::open(path)
        .and_then(|file| file.take(MAX_SOURCE_BYTES + 1).read_to_string(&mut text))
        .map_err(|error| failed(format!("cannot read template: {error}")))?;
    if text.len() as u64 > MAX_SOURCE_BYTES {
        return Err(failed(format!(
            "the file is larger than {MAX_SOURCE_BYTES} bytes, the largest template read"
        )));
    }
    Ok(text)
}

/// The `*.yaml` / `*.yml` files directly in `dir`, sorted by path.
/// Whether `path` names a template test file (`*.test.yaml`, `*.test.yml`): those sit
/// beside templates but are read by `colloquy templates test`, never loaded as templates.
pub fn is_test_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| name.ends_with(".test.yaml") || name.ends_with(".test.yml"))
}

fn template_files(dir: &Path) -> Result<Vec<PathBuf>, Box<Diagnostic>> {
    let unreadable = |error: std::io::Error| {
        Box::new(Diagnostic {
            file: Some(dir.to_path_buf()),
            line: None,
            column: None,
            path: String::new(),
            message: format!("cannot read template directory: {error}"),
            hint: None,
        })
    };
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(unreadable)? {
        let path = entry.map_err(unreadable)?.path();
        let is_yaml = path
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml");
        if is_yaml && !is_test_file(&path) && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests;
