//! The catalog: compiled templates by name and revision. A fixed catalog (`colloquy serve`
//! without a policy manager, tests) keeps every revision inserted; the live catalog's
//! snapshots hold only the current revisions and keep retired ones aside
//! (`crate::live`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::compiled::CompiledTemplate;

/// An immutable set of compiled templates. A reload builds a new catalog and swaps it in whole.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    latest: HashMap<Arc<str>, Arc<CompiledTemplate>>,
    by_revision: HashMap<(Arc<str>, Arc<str>), Arc<CompiledTemplate>>,
}

impl Catalog {
    /// A catalog holding these templates (later ones win on a name clash).
    pub fn new(templates: impl IntoIterator<Item = Arc<CompiledTemplate>>) -> Catalog {
        let mut catalog = Catalog::default();
        for template in templates {
            catalog.insert(template);
        }
        catalog
    }

    /// Adds a template as the newest revision of its name; the previous revision stays
    /// reachable through [`Catalog::revision`].
    pub fn insert(&mut self, template: Arc<CompiledTemplate>) {
        self.by_revision.insert(
            (template.name.clone(), template.revision.clone()),
            template.clone(),
        );
        self.latest.insert(template.name.clone(), template);
    }

    /// The newest revision of `name`, which new conversations use.
    pub fn latest(&self, name: &str) -> Option<Arc<CompiledTemplate>> {
        self.latest.get(name).cloned()
    }

    /// A specific revision, for conversations pinned to it.
    pub fn revision(&self, name: &str, revision: &str) -> Option<Arc<CompiledTemplate>> {
        self.by_revision
            .get(&(Arc::from(name), Arc::from(revision)))
            .cloned()
    }

    /// The newest revision of every template, sorted by name.
    pub fn templates(&self) -> Vec<Arc<CompiledTemplate>> {
        let mut templates: Vec<_> = self.latest.values().cloned().collect();
        templates.sort_by(|a, b| a.name.cmp(&b.name));
        templates
    }

    /// Every revision of `name` this catalog can look up (the newest among them, if the
    /// template still exists), in no particular order.
    pub fn revisions_of(&self, name: &str) -> Vec<Arc<CompiledTemplate>> {
        self.by_revision
            .iter()
            .filter(|((template, _), _)| &**template == name)
            .map(|(_, template)| template.clone())
            .collect()
    }

    /// Names of the templates new conversations can start, sorted.
    pub fn names(&self) -> Vec<Arc<str>> {
        let mut names: Vec<_> = self.latest.keys().cloned().collect();
        names.sort();
        names
    }
}
