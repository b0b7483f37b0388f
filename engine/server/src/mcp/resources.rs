//! The MCP resources: each conversation the caller may read
//! (`colloquy://conversations/{id}`), its inbox (`colloquy://inbox/{agent}`) and the
//! templates (`colloquy://templates/{name}`); read through the API as the caller, and
//! followed for subscriptions through the API's own event streams.

use std::future::Future;

use colloquy_core::engine::TemplateSource;
use rmcp::ErrorData;
use rmcp::model::{ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult};
use serde_json::{Value, json};

use super::api::{Api, Refused, encode};
use super::protocols;

/// Every resource URI starts so.
pub const SCHEME: &str = "colloquy://";
/// How many of the caller's conversations `resources/list` shows, newest first.
pub const LISTED_CONVERSATIONS: usize = 100;

/// What a resource URI names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resource {
    /// A conversation.
    Conversation(String),
    /// An agent's inbox.
    Inbox(String),
    /// A template.
    Template(String),
}

impl Resource {
    /// The resource `uri` names, if it names one.
    pub fn parse(uri: &str) -> Option<Resource> {
        let rest = uri.strip_prefix(SCHEME)?;
        let (kind, name) = rest.split_once('/')?;
        if name.is_empty() || name.contains('/') {
            return None;
        }
        match kind {
            "conversations" => Some(Resource::Conversation(name.to_owned())),
            "inbox" => Some(Resource::Inbox(name.to_owned())),
            "templates" => Some(Resource::Template(name.to_owned())),
            _ => None,
        }
    }

    /// Its URI.
    pub fn uri(&self) -> String {
        match self {
            Resource::Conversation(id) => format!("{SCHEME}conversations/{id}"),
            Resource::Inbox(agent) => format!("{SCHEME}inbox/{agent}"),
            Resource::Template(name) => format!("{SCHEME}templates/{name}"),
        }
    }
}

fn not_found(uri: &str, why: &str) -> ErrorData {
    ErrorData::resource_not_found(
        format!("no resource {uri}: {why}"),
        Some(json!({"uri": uri})),
    )
}

/// A read refused by the API: unknown and unreadable alike are "not found", so a stranger
/// learns nothing of a conversation it may not read.
fn read_refused(uri: &str, refusal: Refused) -> ErrorData {
    if refusal.status.is_client_error() {
        not_found(uri, &refusal.message)
    } else {
        ErrorData::internal_error(refusal.message, None)
    }
}

/// `resources/list`: the caller's inbox, its newest conversations, the templates.
pub async fn list(
    api: &Api,
    agent: &str,
    templates: &dyn TemplateSource,
) -> Result<ListResourcesResult, ErrorData> {
    let mut resources = vec![json!({
        "uri": Resource::Inbox(agent.to_owned()).uri(),
        "name": format!("inbox of {agent}"),
        "description": "The messages waiting for you, oldest first (read with wait_for_messages to acknowledge them).",
        "mimeType": "application/json",
    })];
    let page = api
        .get(&format!(
            "/v1/conversations?order=desc&limit={LISTED_CONVERSATIONS}"
        ))
        .await
        .map_err(|refusal| ErrorData::internal_error(refusal.message, None))?;
    for conversation in page["conversations"].as_array().into_iter().flatten() {
        let id = conversation["id"].as_str().unwrap_or_default();
        resources.push(json!({
            "uri": Resource::Conversation(id.to_owned()).uri(),
            "name": format!("conversation {id}"),
            "description": format!(
                "{} conversation started by {}, {}",
                conversation["template"].as_str().unwrap_or("a"),
                conversation["initiator"].as_str().unwrap_or("someone"),
                conversation["status"].as_str().unwrap_or("active"),
            ),
            "mimeType": "application/json",
        }));
    }
    for name in templates.names() {
        resources.push(json!({
            "uri": Resource::Template(name.to_string()).uri(),
            "name": format!("template {name}"),
            "description": "A conversation protocol: roles, states, content schemas.",
            "mimeType": "application/json",
        }));
    }
    serde_json::from_value(json!({ "resultType": "complete", "resources": resources }))
        .map_err(|error| ErrorData::internal_error(error.to_string(), None))
}

/// `resources/templates/list`.
pub fn templates() -> ListResourceTemplatesResult {
    serde_json::from_value(json!({"resultType": "complete", "resourceTemplates": [
        {
            "uriTemplate": format!("{SCHEME}conversations/{{id}}"),
            "name": "conversation",
            "description": "A conversation you take part in or observe, as you may see it.",
            "mimeType": "application/json",
        },
        {
            "uriTemplate": format!("{SCHEME}templates/{{name}}"),
            "name": "template",
            "description": "A conversation protocol: roles, states, content schemas.",
            "mimeType": "application/json",
        },
    ]}))
    .expect("resource templates have the MCP shape")
}

/// `resources/read`.
pub async fn read(
    api: &Api,
    templates: &dyn TemplateSource,
    uri: &str,
) -> Result<ReadResourceResult, ErrorData> {
    let resource = Resource::parse(uri)
        .ok_or_else(|| not_found(uri, "not a conversation, inbox or template URI"))?;
    let body: Value = match &resource {
        Resource::Conversation(id) => api
            .get(&format!("/v1/conversations/{}", encode(id)))
            .await
            .map_err(|refusal| read_refused(uri, refusal))?,
        Resource::Inbox(agent) => api
            .get(&format!("/v1/agents/{}/inbox/poll?after=0", encode(agent)))
            .await
            .map_err(|refusal| read_refused(uri, refusal))?,
        Resource::Template(name) => {
            let template = templates
                .latest(name)
                .ok_or_else(|| not_found(uri, "no such template"))?;
            protocols::summary(&template)
        }
    };
    serde_json::from_value(json!({"resultType": "complete", "contents": [{
        "uri": uri,
        "mimeType": "application/json",
        "text": body.to_string(),
    }]}))
    .map_err(|error| ErrorData::internal_error(error.to_string(), None))
}

/// Follows resource `uri` for a subscription: calls `updated` after each change the caller
/// may see, until the resource can change no more (a conversation ended), `updated` returns
/// false (the subscriber is gone) or the caller may not read it. Templates are not followed.
pub async fn watch<F, Fut>(api: Api, agent: String, uri: String, updated: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let path = match Resource::parse(&uri) {
        Some(Resource::Conversation(id)) => {
            let path = format!("/v1/conversations/{}", encode(&id));
            let Ok(view) = api.get(&path).await else {
                return;
            };
            let version = view["version"].as_u64().unwrap_or(0);
            format!("{path}/events?after={version}")
        }
        Some(Resource::Inbox(owner)) => {
            let Ok(agents) = api.get("/v1/agents").await else {
                return;
            };
            let head = agents["agents"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|entry| entry["id"] == owner.as_str() && owner == agent)
                .and_then(|entry| entry["inbox_head"].as_u64());
            let Some(head) = head else { return };
            format!("/v1/agents/{}/inbox?after={head}", encode(&owner))
        }
        _ => return,
    };
    let _ = api.follow_events(&path, updated).await;
}

#[cfg(test)]
mod tests {
    use super::Resource;

    #[test]
    fn uris_name_one_resource_each() {
        for resource in [
            Resource::Conversation("0197-a".into()),
            Resource::Inbox("bob".into()),
            Resource::Template("fipa-request".into()),
        ] {
            assert_eq!(Resource::parse(&resource.uri()), Some(resource));
        }
        for uri in [
            "colloquy://conversations/",
            "colloquy://conversations/a/b",
            "colloquy://agents/bob",
            "https://conversations/x",
        ] {
            assert_eq!(Resource::parse(uri), None, "{uri}");
        }
    }
}
