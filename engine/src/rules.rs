//! Declarative rules: CEL conditions evaluated over a conversation, and the action
//! executor's first half — turning actions (from rules or, later, hooks) into [`Effects`].
//!
//! Rules see the conversation as it was before the event being handled; their effects are
//! applied together afterwards, so rule order does not change what a condition sees.

use std::fmt;
use std::sync::{Arc, LazyLock};

use colloquy_policy::compiled::{CompiledAction, CompiledRule, Expression};
use colloquy_protocol::action::{Action, RetryAction, RouteMode, SendAction};
use colloquy_protocol::conversation::Outcome;
use colloquy_protocol::message::Message;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::conversation::Conversation;

/// What a timer step is about, as `on_timeout` rules see it (`timeout` in CEL).
#[derive(Clone, Debug, Serialize)]
pub struct TimeoutInfo {
    /// `conversation`, `thread` or `retry`.
    pub kind: &'static str,
    /// The thread's participant, for thread deadlines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub participant: Option<String>,
    /// Retries run so far.
    pub attempt: u32,
}

/// The variables an expression can see.
pub struct Scope<'a> {
    /// The conversation before the event.
    pub conversation: &'a Conversation,
    /// The message being handled, if any.
    pub message: Option<&'a Message>,
    /// The timer being handled, if any.
    pub timeout: Option<&'a TimeoutInfo>,
    /// Engine time.
    pub now: u64,
}

#[derive(Serialize)]
struct ConversationFacts<'a> {
    id: &'a str,
    template: &'a str,
    revision: &'a str,
    initiator: &'a str,
    participants: Vec<&'a str>,
    deadline: Option<u64>,
}

#[derive(Serialize)]
struct ThreadFacts<'a> {
    participant: &'a str,
    state: &'a str,
    outcome: Option<&'static str>,
    terminal: bool,
}

/// CEL's standard library (functions, macros, types), built once per process: building it
/// takes longer than evaluating the rules of a message, and every scope shares it.
fn cel_stdlib() -> Arc<cel::Env> {
    static STDLIB: LazyLock<Arc<cel::Env>> = LazyLock::new(|| Arc::new(cel::Env::stdlib()));
    Arc::clone(&STDLIB)
}

impl Scope<'_> {
    /// The CEL variables `reads` asks for. Each one is converted from engine state on every
    /// evaluation, so the ones no expression reads are left out.
    fn context(&self, reads: &dyn Fn(&str) -> bool) -> cel::Context<'static, 'static> {
        let conversation = self.conversation;
        let started = &conversation.started;
        let mut context = cel::Context::with_env(cel_stdlib());
        let mut add = |name: &str, value: &dyn erased::Serializable| {
            if !reads(name) {
                return;
            }
            if let Err(error) = value.add_to(&mut context, name) {
                tracing::warn!(conversation = %started.id, variable = name, %error, "cannot expose variable to CEL");
            }
        };
        add("parameters", &started.parameters);
        add("context", &started.context);
        add("vars", &conversation.vars);
        add("now", &self.now);
        if reads("conversation") {
            add(
                "conversation",
                &ConversationFacts {
                    id: &started.id,
                    template: &started.template,
                    revision: &started.revision,
                    initiator: &started.initiator,
                    participants: started.participants.iter().map(|p| &**p).collect(),
                    deadline: conversation.deadline,
                },
            );
        }
        if reads("threads") {
            let threads: Vec<ThreadFacts<'_>> = conversation
                .threads
                .iter()
                .map(|thread| {
                    let outcome = conversation.thread_outcome(thread);
                    ThreadFacts {
                        participant: &thread.participant,
                        state: &conversation.template.machine.state(thread.state).name,
                        outcome: outcome.map(Outcome::name),
                        terminal: outcome.is_some(),
                    }
                })
                .collect();
            add("threads", &threads);
        }
        if let Some(message) = self.message {
            add("message", message);
            if reads("content") {
                add("content", &message.content.value());
            }
            add("sender", &&*message.sender);
            add("performative", &message.performative.name());
        }
        if reads("retry") {
            add(
                "retry",
                &serde_json::json!({ "attempt": conversation.retry.attempts }),
            );
        }
        if reads("timeout") {
            let timeout = self.timeout.cloned().unwrap_or(TimeoutInfo {
                kind: "none",
                participant: None,
                attempt: conversation.retry.attempts,
            });
            add("timeout", &timeout);
        }
        context
    }

    /// Evaluates a condition. A runtime error (a missing key, a type mismatch) counts as
    /// false and is logged: one bad message must not wedge a conversation.
    pub fn holds(&self, expression: &Expression) -> bool {
        self.holds_in(&self.context(&|name| expression.reads(name)), expression)
    }

    /// The value paired with the first condition that holds (`None` holds always), with
    /// the variables built once for all of them.
    pub fn first_match<'r, T>(&self, rules: &'r [(Option<Expression>, T)]) -> Option<&'r T> {
        if rules.is_empty() {
            return None;
        }
        let context = self.context(&|name| {
            rules
                .iter()
                .any(|(when, _)| when.as_ref().is_some_and(|when| when.reads(name)))
        });
        rules
            .iter()
            .find(|(when, _)| {
                when.as_ref()
                    .is_none_or(|when| self.holds_in(&context, when))
            })
            .map(|(_, value)| value)
    }

    fn holds_in(&self, context: &cel::Context<'_, '_>, expression: &Expression) -> bool {
        match expression.program.execute(context) {
            Ok(cel::Value::Bool(value)) => value,
            Ok(other) => {
                tracing::warn!(conversation = %self.conversation.started.id, expression = %expression.source, value = ?other, "condition is not a boolean; treated as false");
                false
            }
            Err(error) => {
                tracing::warn!(conversation = %self.conversation.started.id, expression = %expression.source, %error, "condition failed; treated as false");
                false
            }
        }
    }

    fn evaluate(&self, context: &cel::Context<'_, '_>, expression: &Expression) -> Value {
        let value = match expression.program.execute(context) {
            Ok(value) => value,
            Err(error) => {
                tracing::warn!(conversation = %self.conversation.started.id, expression = %expression.source, %error, "expression failed; stored as null");
                return Value::Null;
            }
        };
        match value.json() {
            Ok(json) => json,
            Err(error) => {
                tracing::warn!(conversation = %self.conversation.started.id, expression = %expression.source, %error, "value has no JSON form; stored as null");
                Value::Null
            }
        }
    }

    /// Runs every matching rule of `rules` and collects their actions into `effects`.
    pub fn run_rules(&self, rules: &[CompiledRule], effects: &mut Effects) {
        if rules.is_empty() {
            return;
        }
        let context = self.context(&|name| rules.iter().any(|rule| rule_reads(rule, name)));
        for rule in rules {
            if let Some(message) = self.message
                && !rule.performatives.is_empty()
                && !rule.performatives.contains(&message.performative)
            {
                continue;
            }
            if let Some(when) = &rule.when
                && !self.holds_in(&context, when)
            {
                continue;
            }
            for action in &rule.then {
                match action {
                    CompiledAction::Literal(action) => effects.add(&rule.name, action.clone()),
                    CompiledAction::EvalVars(expressions) => {
                        for (name, expression) in expressions {
                            effects
                                .vars
                                .insert(name.clone(), self.evaluate(&context, expression));
                        }
                    }
                }
            }
        }
    }
}

/// Whether a rule's condition or one of its computed values reads the variable `name`.
fn rule_reads(rule: &CompiledRule, name: &str) -> bool {
    rule.when.as_ref().is_some_and(|when| when.reads(name))
        || rule.then.iter().any(|action| match action {
            CompiledAction::Literal(_) => false,
            CompiledAction::EvalVars(expressions) => expressions
                .iter()
                .any(|(_, expression)| expression.reads(name)),
        })
}

/// Everything a set of actions asks for, gathered before any of it is applied.
#[derive(Debug, Default)]
pub struct Effects {
    /// The first rejection, with the rule that made it.
    pub reject: Option<(String, String)>,
    /// Variables to merge.
    pub vars: Map<String, Value>,
    /// Messages to send as the engine party.
    pub sends: Vec<SendAction>,
    /// Receivers to add to the current message.
    pub route_add: Vec<String>,
    /// Receivers to replace the current message's with.
    pub route_replace: Option<Vec<String>>,
    /// New conversation deadline: `Set(in_ms)` or `Extend(by_ms)`.
    pub deadline: Option<DeadlineChange>,
    /// A retry to schedule.
    pub retry: Option<RetryAction>,
    /// Complete with this outcome and reason.
    pub complete: Option<(Outcome, Option<String>)>,
    /// Agents to escalate to, with reasons.
    pub escalations: Vec<(String, String)>,
}

/// See [`Effects::deadline`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DeadlineChange {
    /// Milliseconds from now.
    Set(u64),
    /// Milliseconds added to the current deadline.
    Extend(u64),
}

impl Effects {
    /// Adds one action; `origin` names the rule or hook for rejections and logs (written
    /// out only for those, not for every action).
    pub fn add(&mut self, origin: &dyn fmt::Display, action: Action) {
        match action {
            Action::Continue => {}
            Action::Reject(reject) => {
                self.reject
                    .get_or_insert_with(|| (origin.to_string(), reject.reason));
            }
            // `append` takes the map whole when there is nothing yet (the usual case).
            Action::SetVars(mut vars) => self.vars.append(&mut vars),
            Action::EvalVars(_) => {
                tracing::warn!(%origin, "eval_vars is only for declarative rules; ignored");
            }
            Action::Send(send) => self.sends.push(send),
            Action::Route(route) => match route.mode {
                RouteMode::Add => self.route_add.extend(route.to),
                RouteMode::Replace => self.route_replace = Some(route.to),
            },
            Action::SetDeadline(set) => self.deadline = Some(DeadlineChange::Set(set.in_ms)),
            Action::ExtendDeadline(extend) => {
                self.deadline = Some(DeadlineChange::Extend(extend.by_ms));
            }
            Action::Retry(retry) => self.retry = Some(retry),
            Action::Complete(complete) => {
                self.complete
                    .get_or_insert((complete.outcome, complete.reason));
            }
            Action::Escalate(escalate) => self.escalations.push((escalate.to, escalate.reason)),
            Action::Log(log) => log_line(origin, log.level, &log.message),
        }
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.reject.is_none()
            && self.vars.is_empty()
            && self.sends.is_empty()
            && self.route_add.is_empty()
            && self.route_replace.is_none()
            && self.deadline.is_none()
            && self.retry.is_none()
            && self.complete.is_none()
            && self.escalations.is_empty()
    }
}

/// A `log` action's line. Hooks write these too, so the message is kept on one line.
fn log_line(origin: &dyn fmt::Display, level: colloquy_protocol::action::LogLevel, message: &str) {
    use colloquy_protocol::action::LogLevel;
    let message = crate::log_safe::OneLine(message);
    match level {
        LogLevel::Debug => tracing::debug!(%origin, "{message}"),
        LogLevel::Info => tracing::info!(%origin, "{message}"),
        LogLevel::Warn => tracing::warn!(%origin, "{message}"),
        LogLevel::Error => tracing::error!(%origin, "{message}"),
    }
}

mod erased {
    //! Lets [`super::Scope::context`] add differently typed serde values through one closure.
    use serde::Serialize;

    pub trait Serializable {
        fn add_to(
            &self,
            context: &mut cel::Context<'static, 'static>,
            name: &str,
        ) -> Result<(), String>;
    }

    impl<T: Serialize> Serializable for T {
        fn add_to(
            &self,
            context: &mut cel::Context<'static, 'static>,
            name: &str,
        ) -> Result<(), String> {
            context
                .add_variable(name, self)
                .map_err(|error| error.to_string())
        }
    }
}
