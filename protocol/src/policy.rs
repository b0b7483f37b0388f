//! Bodies of the policy manager's HTTP API (`/v1/templates`, `/v1/watch`, `/v1/status`):
//! what it serves, and what remote engines following it read.

use serde::{Deserialize, Serialize};

use crate::error::ErrorDetail;

/// Media type of a template served as its YAML text.
pub const YAML_MEDIA_TYPE: &str = "application/yaml";
/// SSE event name of a change-feed entry (`GET /v1/watch`).
pub const CATALOG_EVENT: &str = "catalog";

/// One template new conversations can start, at its newest revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateSummary {
    /// `metadata.name`.
    pub name: String,
    /// Content hash of its YAML and hook module: `sha256:<hex>`.
    pub revision: String,
}

/// `GET /v1/templates`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateList {
    /// The catalog revision (a hash over every template's name and revision).
    pub revision: String,
    /// The templates, sorted by name.
    pub templates: Vec<TemplateSummary>,
}

/// A template's hook module, as a template document names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleRef {
    /// The path written in the template's `spec.hooks.module` (relative to the template).
    pub module: String,
    /// SHA-256 of the module's bytes, lowercase hex; fetch them from
    /// `GET /v1/templates/{name}/modules/{sha256}`.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
    /// `core_module` (ABI v1) or `component` (the hooks WIT world), read from the module's
    /// first bytes; absent from managers that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// `GET /v1/templates/{name}` with `Accept: application/json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TemplateDocument {
    /// `metadata.name`.
    pub name: String,
    /// Its revision (also the response's `ETag`).
    pub revision: String,
    /// The YAML text exactly as compiled: compiling it (with its module) again gives the same
    /// revision.
    pub source: String,
    /// The hook module, if the template has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_module: Option<ModuleRef>,
    /// The template as JSON.
    pub template: serde_json::Value,
}

/// One revision of a template the policy manager still holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionInfo {
    /// The revision.
    pub revision: String,
    /// When this process first loaded it (milliseconds since the Unix epoch).
    pub loaded_at: u64,
    /// Whether new conversations use it.
    pub current: bool,
}

/// `GET /v1/templates/{name}/revisions`: newest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionList {
    /// The template.
    pub name: String,
    /// Its revisions still loaded (running conversations may be pinned to any of them).
    pub revisions: Vec<RevisionInfo>,
}

/// One compiler diagnostic, as the API reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagnosticBody {
    /// The file, when the template came from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// 1-based line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// 1-based column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    /// The path inside the template, e.g. `spec.thread.initial`.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it, when the compiler knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// Why the last reload was refused (the previous catalog kept serving).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadFailure {
    /// When it failed (milliseconds since the Unix epoch).
    pub at: u64,
    /// A summary.
    pub message: String,
    /// Every problem found.
    pub diagnostics: Vec<DiagnosticBody>,
}

/// `GET /v1/status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyStatus {
    /// The catalog revision serving now.
    pub revision: String,
    /// When it was loaded (milliseconds since the Unix epoch).
    pub loaded_at: u64,
    /// How many catalogs this process has swapped in (1 after the first load).
    pub generation: u64,
    /// How many templates new conversations can start.
    pub templates: usize,
    /// Where the templates come from: a directory, or the policy manager a remote engine
    /// follows.
    pub source: String,
    /// The last reload's failure; `None` once a reload succeeds again.
    #[serde(default)]
    pub last_error: Option<ReloadFailure>,
    /// New revisions waiting for their hook module to compile, oldest first: not served yet
    /// (the template's previous revision, if any, serves meanwhile). Each leaves the list
    /// when its compile ends: it then serves, or its failure is `last_error`.
    #[serde(default)]
    pub compiling: Vec<CompilingRevision>,
}

/// A template revision waiting for its hook module to compile before it can serve.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompilingRevision {
    /// The template's name.
    pub template: String,
    /// The revision that serves once its hook is compiled.
    pub revision: String,
    /// SHA-256 of the hook module being compiled, lowercase hex.
    pub hook_sha256: String,
    /// When a reload first found it compiling (milliseconds since the Unix epoch).
    pub since: u64,
}

/// Answer to `PUT /v1/templates/{name}`: `200`/`201` when the revision serves at once,
/// `202` when it waits for its hook module to compile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateUploaded {
    /// `metadata.name`.
    pub name: String,
    /// The uploaded revision.
    pub revision: String,
    /// With `202`: the revision and its hook module compiling. It serves once `GET
    /// /v1/status` no longer lists it and shows no `last_error` for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiling: Option<CompilingRevision>,
}

/// Answer to `PUT /v1/modules/{file}` with `202`: templates naming the module got new
/// revisions that wait for it to compile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleUploaded {
    /// The revisions waiting (also listed by `GET /v1/status` until their compile ends).
    pub compiling: Vec<CompilingRevision>,
}

/// One entry of the change feed (`GET /v1/watch`, SSE event `catalog`): the whole catalog
/// after a swap, so a follower that missed entries still converges. The first entry of a
/// stream is the catalog at connection time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogChange {
    /// The catalog revision.
    pub revision: String,
    /// When it was loaded (milliseconds since the Unix epoch).
    pub loaded_at: u64,
    /// Every template, sorted by name.
    pub templates: Vec<TemplateSummary>,
    /// Names added or changed since this stream's previous entry (every name in the first).
    #[serde(default)]
    pub changed: Vec<String>,
    /// Names deleted since this stream's previous entry.
    #[serde(default)]
    pub removed: Vec<String>,
}

/// 422 answer to an upload that does not compile: the usual error body plus every
/// diagnostic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateRejected {
    /// What went wrong (`code: invalid_template`).
    pub error: ErrorDetail,
    /// Every problem found.
    pub diagnostics: Vec<DiagnosticBody>,
}
