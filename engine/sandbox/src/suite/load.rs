//! Reading a test file: parsing it, finding its templates, and checking what the engine
//! would otherwise only trip over at run time (a performative the template does not have, a
//! sender who is not in the conversation), each problem a diagnostic at its file:line:col.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use colloquy_policy::locations::Locations;
use colloquy_policy::{CompiledTemplate, Diagnostic, Diagnostics, TemplateCompiler};
use colloquy_protocol::template::API_VERSION_V1;

use super::file::{Case, Message, TEST_KIND, TestFile};

/// A test file read and checked, with the templates it names.
#[derive(Debug)]
pub struct Suite {
    /// The file.
    pub path: PathBuf,
    /// What it says.
    pub file: TestFile,
    /// Where each of its keys is written.
    pub locations: Locations,
    /// The templates its cases run against, in the order it names them.
    pub templates: Vec<Arc<CompiledTemplate>>,
}

impl Suite {
    /// `file:line:col` of `path` in the test file (or of its nearest written ancestor).
    pub fn position(&self, path: &str) -> String {
        match self.locations.nearest(path) {
            Some(at) => format!("{}:{}:{}", self.path.display(), at.line, at.column),
            None => self.path.display().to_string(),
        }
    }
}

/// Compiles template directories once each, however many test files sit in them.
#[derive(Default)]
pub struct TemplateDirs {
    compiler: TemplateCompiler,
    dirs: HashMap<PathBuf, Result<Vec<Arc<CompiledTemplate>>, Diagnostics>>,
}

impl TemplateDirs {
    /// The templates of `dir` (its `*.yaml` files but test files), compiled.
    fn of(&mut self, dir: &Path) -> &Result<Vec<Arc<CompiledTemplate>>, Diagnostics> {
        let compiler = &self.compiler;
        self.dirs.entry(dir.to_path_buf()).or_insert_with(|| {
            compiler
                .compile_dir(dir)
                .map(|templates| templates.into_iter().map(Arc::new).collect())
        })
    }
}

/// Reads, parses and checks the test file at `path`.
pub fn load(path: &Path, dirs: &mut TemplateDirs) -> Result<Suite, Diagnostics> {
    let source = std::fs::read_to_string(path).map_err(|error| {
        one(diagnostic(
            path,
            None,
            "",
            format!("cannot read the test file: {error}"),
            None,
        ))
    })?;
    let locations = Locations::index(&source);
    let file: TestFile = serde_norway::from_str(&source).map_err(|error| {
        let at = error.location().map(|at| (at.line(), at.column()));
        // The position is the diagnostic's; serde's text repeats it at its end.
        let text = error.to_string();
        let text = match at {
            Some((line, column)) => text
                .strip_suffix(&format!(" at line {line} column {column}"))
                .unwrap_or(&text)
                .to_owned(),
            None => text,
        };
        one(diagnostic(
            path,
            at,
            "",
            text,
            Some("see `colloquy templates schema --kind test` for the format".to_owned()),
        ))
    })?;
    let mut problems = Problems {
        path,
        locations: &locations,
        list: Vec::new(),
    };
    if file.api_version != API_VERSION_V1 {
        problems.add(
            "apiVersion",
            format!("unknown apiVersion `{}`", file.api_version),
            Some(format!("write `{API_VERSION_V1}`")),
        );
    }
    if file.kind != TEST_KIND {
        problems.add(
            "kind",
            format!("a test file's kind is `{TEST_KIND}`, not `{}`", file.kind),
            None,
        );
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut templates = Vec::new();
    for (index, reference) in file.template.all().into_iter().enumerate() {
        let key = match file.template {
            super::file::TemplateRef::One(_) => "template".to_owned(),
            super::file::TemplateRef::Many(_) => format!("template[{index}]"),
        };
        match find_template(dir, reference, dirs) {
            Ok(template) => templates.push(template),
            Err((message, hint)) => problems.add(&key, message, hint),
        }
    }
    if file.cases.is_empty() {
        problems.add("cases", "a test file needs at least one case".into(), None);
    }
    for (index, case) in file.cases.iter().enumerate() {
        check_case(&mut problems, &format!("cases[{index}]"), case, &templates);
    }
    if !problems.list.is_empty() {
        return Err(Diagnostics::sorted(problems.list));
    }
    Ok(Suite {
        path: path.to_path_buf(),
        file,
        locations,
        templates,
    })
}

/// Whether a reference to a template is a file path (else a `metadata.name`).
pub fn is_template_path(reference: &str) -> bool {
    reference.contains('/') || reference.ends_with(".yaml") || reference.ends_with(".yml")
}

/// A template by name among `dir`'s, or by path relative to `dir`: on failure, what is
/// wrong and a hint.
pub fn find_template(
    dir: &Path,
    reference: &str,
    dirs: &mut TemplateDirs,
) -> Result<Arc<CompiledTemplate>, (String, Option<String>)> {
    if is_template_path(reference) {
        let file = dir.join(reference);
        return dirs
            .compiler
            .compile_file(&file)
            .map(Arc::new)
            .map_err(|diagnostics| {
                (
                    format!("the template `{reference}` does not compile:\n{diagnostics}"),
                    None,
                )
            });
    }
    match dirs.of(dir) {
        Ok(templates) => templates
            .iter()
            .find(|template| &*template.name == reference)
            .cloned()
            .ok_or_else(|| {
                let names: Vec<&str> = templates.iter().map(|t| &*t.name).collect();
                (
                    format!("no template named `{reference}` in {}", dir.display()),
                    Some(if names.is_empty() {
                        "the directory has no templates; give a path to the template file".into()
                    } else {
                        format!("the directory has: {}", names.join(", "))
                    }),
                )
            }),
        Err(diagnostics) => Err((
            format!(
                "the templates of {} do not compile:\n{diagnostics}",
                dir.display()
            ),
            None,
        )),
    }
}

/// Checks a case against every template it runs on.
fn check_case(
    problems: &mut Problems<'_>,
    at: &str,
    case: &Case,
    templates: &[Arc<CompiledTemplate>],
) {
    let start = &case.start;
    let mut parties: BTreeSet<&str> = start.participants.iter().map(String::as_str).collect();
    parties.insert(start.initiator.as_str());
    if let Some(message) = &start.message {
        let at = format!("{at}.start.message");
        if let Some(from) = &message.from
            && *from != start.initiator
        {
            problems.add(
                &format!("{at}.from"),
                format!(
                    "the opening message is the initiator's (`{}`), not `{from}`'s",
                    start.initiator
                ),
                Some("leave `from` out of `start.message`".into()),
            );
        }
        check_message(problems, &at, message, &parties, templates);
    }
    for (index, step) in case.steps.iter().enumerate() {
        let at = format!("{at}.steps[{index}]");
        match (&step.send, &step.advance) {
            (Some(message), None) => {
                if message.from.is_none() {
                    problems.add(
                        &format!("{at}.send"),
                        "a message sent in a step needs its sender".into(),
                        Some("add `from: AGENT`".into()),
                    );
                }
                check_message(
                    problems,
                    &format!("{at}.send"),
                    message,
                    &parties,
                    templates,
                );
            }
            (None, Some(_)) => {
                if step.refused.is_some() {
                    problems.add(
                        &format!("{at}.refused"),
                        "advancing the clock is never refused".into(),
                        Some("expect what the deadlines did with `expect`".into()),
                    );
                }
            }
            (Some(_), Some(_)) => problems.add(
                &at,
                "a step either sends or advances, not both".into(),
                Some("split it into two steps".into()),
            ),
            (None, None) => problems.add(
                &at,
                "a step needs `send` or `advance`".into(),
                Some("`- send: { from: AGENT, performative: … }` or `- advance: 5m`".into()),
            ),
        }
    }
}

/// Checks a message's sender, receivers and performative.
fn check_message(
    problems: &mut Problems<'_>,
    at: &str,
    message: &Message,
    parties: &BTreeSet<&str>,
    templates: &[Arc<CompiledTemplate>],
) {
    let party_list = || parties.iter().copied().collect::<Vec<_>>().join(", ");
    if let Some(from) = &message.from
        && !parties.contains(from.as_str())
    {
        problems.add(
            &format!("{at}.from"),
            format!("`{from}` is not a party to the conversation"),
            Some(format!("the parties are: {}", party_list())),
        );
    }
    for (index, to) in message.to.iter().enumerate() {
        if !parties.contains(to.as_str()) {
            problems.add(
                &format!("{at}.to[{index}]"),
                format!("`{to}` is not a party to the conversation"),
                Some(format!("the parties are: {}", party_list())),
            );
        }
    }
    for template in templates {
        if template.performative(&message.performative).is_none() {
            problems.add(
                &format!("{at}.performative"),
                format!(
                    "the template `{}` knows no performative `{}`",
                    template.name, message.performative
                ),
                Some(format!(
                    "FIPA's acts and the template's intents are known; its protocol uses: {}",
                    performatives(template)
                        .into_iter()
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            );
        }
    }
}

/// Every performative a template names: in its thread's transitions and its message schemas.
pub fn performatives(template: &CompiledTemplate) -> BTreeSet<&str> {
    let mut names: BTreeSet<&str> = template
        .source
        .spec
        .messages
        .keys()
        .map(String::as_str)
        .collect();
    for state in template.source.spec.thread.states.values() {
        for transition in &state.transitions {
            names.insert(transition.performative.as_str());
        }
    }
    names
}

/// The problems found so far, each placed in the test file.
struct Problems<'a> {
    path: &'a Path,
    locations: &'a Locations,
    list: Vec<Diagnostic>,
}

impl Problems<'_> {
    fn add(&mut self, path: &str, message: String, hint: Option<String>) {
        let at = self.locations.nearest(path).map(|at| (at.line, at.column));
        self.list
            .push(diagnostic(self.path, at, path, message, hint));
    }
}

fn diagnostic(
    file: &Path,
    at: Option<(usize, usize)>,
    path: &str,
    message: String,
    hint: Option<String>,
) -> Diagnostic {
    Diagnostic {
        file: Some(file.to_path_buf()),
        line: at.map(|(line, _)| line),
        column: at.map(|(_, column)| column),
        path: path.to_owned(),
        message,
        hint,
    }
}

fn one(diagnostic: Diagnostic) -> Diagnostics {
    Diagnostics::from(vec![diagnostic])
}
