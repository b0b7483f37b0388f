//! The catalog: compiled templates by name, newest revision first, older revisions kept so
//! running conversations stay pinned to the revision they started with.

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

    /// Names of the templates new conversations can start, sorted.
    pub fn names(&self) -> Vec<Arc<str>> {
        let mut names: Vec<_> = self.latest.keys().cloned().collect();
        names.sort();
        names
    }
}
