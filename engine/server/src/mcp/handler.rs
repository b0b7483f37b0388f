//! The MCP server handler: one per legacy session (2025-11-25) or per request (2026-07-28,
//! stateless). It knows the caller from what the gate ([`super::gate`]) put in the request,
//! and serves tools, resources, subscriptions and the `take_part` prompt through the API as
//! that caller.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use colloquy_core::engine::TemplateSource;
use colloquy_protocol::message::AgentId;
use colloquy_protocol::template::Role;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, GetPromptRequestParams, GetPromptResponse,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use tokio::task::AbortHandle;

use super::api::{Api, Credential};
use super::{protocols, resources, tools};

/// Who is calling: what the gate found in the request's credentials.
#[derive(Clone, Debug)]
pub struct McpCaller {
    /// The agent.
    pub agent: AgentId,
    /// Its credential, passed on to the API.
    pub credential: Credential,
}

/// What every handler shares: the API router and the templates.
pub struct Shared {
    /// The API (without `/mcp`).
    pub api: Router,
    /// The engine's templates.
    pub templates: Arc<dyn TemplateSource>,
}

/// The handler.
pub struct ColloquyMcp {
    shared: Arc<Shared>,
    /// A legacy session's `resources/subscribe`s, by URI: ended when unsubscribed or when
    /// the session ends (the handler is dropped).
    subscriptions: Mutex<HashMap<String, AbortHandle>>,
}

impl Drop for ColloquyMcp {
    fn drop(&mut self) {
        let subscriptions = self
            .subscriptions
            .get_mut()
            .unwrap_or_else(|e| e.into_inner());
        for (_, task) in subscriptions.drain() {
            task.abort();
        }
    }
}

/// The instructions a client may hand its model.
const INSTRUCTIONS: &str = "Colloquy is a dialogue engine: you take part in governed \
conversations with other agents as the agent your credentials name. Each conversation follows \
a template (a FIPA interaction protocol) that decides what each side may say. Call \
list_templates to learn the protocols, wait_for_messages in a loop to receive messages (pass \
each result's next_cursor back), get_conversation to see a conversation and the moves open to \
you, and send_message to answer. The prompt take_part briefs you on one protocol and role.";

impl ColloquyMcp {
    /// A handler over `shared`.
    pub fn new(shared: Arc<Shared>) -> ColloquyMcp {
        ColloquyMcp {
            shared,
            subscriptions: Mutex::default(),
        }
    }

    /// The caller of the request `context` is part of; the gate let no request through
    /// without one.
    fn caller(context: &RequestContext<RoleServer>) -> Result<McpCaller, ErrorData> {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<McpCaller>())
            .cloned()
            .ok_or_else(|| ErrorData::invalid_request("no caller: authenticate over HTTP", None))
    }

    fn api(&self, caller: &McpCaller) -> Api {
        Api::new(self.shared.api.clone(), caller.credential.clone())
    }

    fn tool_context(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<tools::ToolContext, ErrorData> {
        let caller = Self::caller(context)?;
        Ok(tools::ToolContext {
            api: self.api(&caller),
            agent: caller.agent,
            templates: self.shared.templates.clone(),
        })
    }
}

impl ServerHandler for ColloquyMcp {
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25])
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_prompts()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_tools()
                .build(),
        )
        .with_server_info(Implementation::new("colloquy", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools: Vec<Tool> = tools::catalogue().to_vec();
        serde_json::from_value(json!({ "resultType": "complete", "tools": tools }))
            .map_err(|error| ErrorData::internal_error(error.to_string(), None))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::find(name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool_context = self.tool_context(&context)?;
        let result = tools::call(&tool_context, &request.name, request.arguments).await?;
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let caller = Self::caller(&context)?;
        resources::list(&self.api(&caller), &caller.agent, &*self.shared.templates).await
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(resources::templates())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = Self::caller(&context)?;
        let api = self.api(&caller);
        Ok(resources::read(&api, &*self.shared.templates, &request.uri)
            .await?
            .into())
    }

    #[allow(
        deprecated,
        reason = "the legacy revision's subscriptions, served for its clients"
    )]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = Self::caller(&context)?;
        let api = self.api(&caller);
        // Reading it first refuses what the caller may not read, as the spec's not-found.
        resources::read(&api, &*self.shared.templates, &request.uri).await?;
        let peer = context.peer.clone();
        let uri = request.uri.clone();
        let task = tokio::spawn(resources::watch(
            api,
            caller.agent.to_string(),
            uri.clone(),
            move || {
                let peer = peer.clone();
                let uri = uri.clone();
                async move {
                    peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                        .await
                        .is_ok()
                }
            },
        ));
        let mut subscriptions = self.subscriptions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(earlier) = subscriptions.insert(request.uri, task.abort_handle()) {
            earlier.abort();
        }
        Ok(())
    }

    #[allow(
        deprecated,
        reason = "the legacy revision's subscriptions, served for its clients"
    )]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let mut subscriptions = self.subscriptions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(task) = subscriptions.remove(&request.uri) {
            task.abort();
        }
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let caller = Self::caller(context.request_context())?;
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let mut watchers = Vec::new();
        for uri in uris {
            let sink = context.sink().clone();
            let api = self.api(&caller);
            let watched = uri.clone();
            watchers.push(tokio::spawn(resources::watch(
                api,
                caller.agent.to_string(),
                watched,
                move || {
                    let sink = sink.clone();
                    let uri = uri.clone();
                    async move { sink.notify_resource_updated(uri).await.is_ok() }
                },
            )));
        }
        context.cancelled().await;
        for watcher in watchers {
            watcher.abort();
        }
        Ok(())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        serde_json::from_value(json!({"resultType": "complete", "prompts": [{
            "name": "take_part",
            "title": "Take part in a conversation protocol",
            "description": "Briefs you on a conversation template's protocol and your role in it: the states of a thread, what each side may send in each, the content schemas, and how to act through the tools.",
            "arguments": [
                {"name": "template", "description": "The template's name (list_templates names them).", "required": true},
                {"name": "role", "description": "initiator or participant (default participant).", "required": false},
            ],
        }]}))
        .map_err(|error| ErrorData::internal_error(error.to_string(), None))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != "take_part" {
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown prompt `{}`: prompts/list names the prompts",
                    request.name
                ),
                None,
            ));
        }
        let arguments = request.arguments.unwrap_or_default();
        let argument = |key: &str| arguments.get(key).and_then(|value| value.as_str());
        let name = argument("template").ok_or_else(|| {
            ErrorData::invalid_params("take_part needs the argument `template`", None)
        })?;
        let role = match argument("role").unwrap_or("participant") {
            "initiator" => Role::Initiator,
            "participant" => Role::Participant,
            other => {
                return Err(ErrorData::invalid_params(
                    format!("role `{other}`: initiator or participant"),
                    None,
                ));
            }
        };
        let template = self
            .shared
            .templates
            .latest(name)
            .ok_or_else(|| ErrorData::invalid_params(format!("no template `{name}`"), None))?;
        let result: rmcp::model::GetPromptResult = serde_json::from_value(json!({
            "resultType": "complete",
            "description": format!("Taking part in {name} as its {}", argument("role").unwrap_or("participant")),
            "messages": [{
                "role": "user",
                "content": {"type": "text", "text": protocols::briefing(&template, role)},
            }],
        }))
        .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        Ok(result.into())
    }
}
