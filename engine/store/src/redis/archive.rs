//! The revision archive in Redis (keys in the parent module's table): a hash of revisions per
//! template with a set naming the templates, a string per hook module, and the history of
//! activations as a list of all of them beside a list per template, so the newest of one
//! template are one `LRANGE` however many others there are. Each write is one `MULTI`
//! transaction (or one command), durable as the commit script is; conversation removal
//! never touches these keys.

use ::redis::AsyncCommands as _;
use colloquy_core::store::archive::{Activation, ArchivedRevision};

use super::{Keys, RedisStore, StoreError, decode, encode, store_error};

impl Keys {
    /// `P:revisions:{template}`: revision → its JSON.
    fn revisions(&self, template: &str) -> String {
        format!("{}:revisions:{template}", self.prefix)
    }
    /// `P:revision-templates`: the templates with revisions kept.
    fn revision_templates(&self) -> String {
        format!("{}:revision-templates", self.prefix)
    }
    /// `P:module:{sha256}`: the module's bytes.
    fn module(&self, sha256: &str) -> String {
        format!("{}:module:{sha256}", self.prefix)
    }
    /// `P:activations`: every activation's JSON, in the order recorded.
    fn activations(&self) -> String {
        format!("{}:activations", self.prefix)
    }
    /// `P:activations:{template}`: the template's activations, in the order recorded.
    fn template_activations(&self, template: &str) -> String {
        format!("{}:activations:{template}", self.prefix)
    }
}

impl RedisStore {
    // The trait's archive methods, in the order the trait declares them.

    pub(super) async fn keep_revision(
        &self,
        revision: &ArchivedRevision,
    ) -> Result<(), StoreError> {
        let body = encode(revision)?;
        let mut connection = self.connection.clone();
        // HSETNX: a revision kept already stays as first kept.
        let _: (bool, bool) = ::redis::pipe()
            .atomic()
            .hset_nx(
                self.keys.revisions(&revision.template),
                &*revision.revision,
                body,
            )
            .sadd(self.keys.revision_templates(), &*revision.template)
            .query_async(&mut connection)
            .await
            .map_err(store_error)?;
        Ok(())
    }

    pub(super) async fn keep_module(&self, sha256: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        let _: bool = connection
            .set_nx(self.keys.module(sha256), bytes)
            .await
            .map_err(store_error)?;
        Ok(())
    }

    pub(super) async fn kept_revisions(
        &self,
        template: Option<&str>,
    ) -> Result<Vec<ArchivedRevision>, StoreError> {
        let mut connection = self.connection.clone();
        let templates: Vec<String> = match template {
            Some(template) => vec![template.to_owned()],
            None => connection
                .smembers(self.keys.revision_templates())
                .await
                .map_err(store_error)?,
        };
        if templates.is_empty() {
            return Ok(Vec::new());
        }
        let mut read = ::redis::pipe();
        for template in &templates {
            read.hvals(self.keys.revisions(template));
        }
        let bodies: Vec<Vec<String>> = read
            .query_async(&mut connection)
            .await
            .map_err(store_error)?;
        let mut revisions = bodies
            .iter()
            .flatten()
            .map(|body| decode(body))
            .collect::<Result<Vec<ArchivedRevision>, _>>()?;
        revisions.sort_by(|a, b| a.listing_order().cmp(&b.listing_order()));
        Ok(revisions)
    }

    pub(super) async fn kept_revision(
        &self,
        template: &str,
        revision: &str,
    ) -> Result<Option<ArchivedRevision>, StoreError> {
        let mut connection = self.connection.clone();
        let body: Option<String> = connection
            .hget(self.keys.revisions(template), revision)
            .await
            .map_err(store_error)?;
        body.as_deref().map(decode).transpose()
    }

    pub(super) async fn kept_module(
        &self,
        sha256: &str,
    ) -> Result<Option<std::sync::Arc<[u8]>>, StoreError> {
        let mut connection = self.connection.clone();
        let bytes: Option<Vec<u8>> = connection
            .get(self.keys.module(sha256))
            .await
            .map_err(store_error)?;
        Ok(bytes.map(std::sync::Arc::from))
    }

    pub(super) async fn append_activation(
        &self,
        activation: &Activation,
    ) -> Result<(), StoreError> {
        let body = encode(activation)?;
        let mut connection = self.connection.clone();
        let _: (usize, usize) = ::redis::pipe()
            .atomic()
            .rpush(self.keys.activations(), &body)
            .rpush(self.keys.template_activations(&activation.template), &body)
            .query_async(&mut connection)
            .await
            .map_err(store_error)?;
        Ok(())
    }

    pub(super) async fn activation_history(
        &self,
        template: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Activation>, StoreError> {
        // LRANGE counts from the end with negative indexes; -0 would be the first entry.
        if limit == 0 {
            return Ok(Vec::new());
        }
        let key = match template {
            Some(template) => self.keys.template_activations(template),
            None => self.keys.activations(),
        };
        let from = -isize::try_from(limit).unwrap_or(isize::MAX);
        let mut connection = self.connection.clone();
        let bodies: Vec<String> = connection
            .lrange(key, from, -1)
            .await
            .map_err(store_error)?;
        bodies.iter().map(|body| decode(body)).collect()
    }
}
