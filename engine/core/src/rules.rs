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

/// Most interpreter steps one CEL evaluation may take, as
/// [`colloquy_policy::compiled::CostShape::estimate`] counts them over the values it reads.
/// A CEL evaluation cannot be interrupted and runs on an async worker, so an expression over
/// the budget is refused before it starts. Measured in release builds on the 2-core VM:
/// `a.exists(x, a.exists(y, x == y + 100000000))` at 1,000 items (a million inner iterations
/// of about 9 steps) took 0.43 s on a quiet machine and 1.2-1.4 s at load 5, 50-140 ns a
/// step; 200,000 steps keep one evaluation at 10-30 ms, and a loop over 10,000 items with a
/// 15-node body fits.
pub const CEL_STEP_BUDGET: u64 = 200_000;

/// A rule's expression that was not evaluated: over the values of this message (or step) it
/// could take more than [`CEL_STEP_BUDGET`] steps.
#[derive(Debug, thiserror::Error)]
#[error(
    "{rule} of template `{template}` was not evaluated: `{expression}` could take {estimate} \
     steps over these values (lists of up to {collection} items, strings of up to {string} \
     bytes), over the budget of {CEL_STEP_BUDGET}; each comprehension nested in another's loop \
     multiplies the work by a list's length"
)]
pub struct TooCostly {
    /// The template.
    pub template: String,
    /// Which rule or guard, as the template places it.
    pub rule: String,
    /// The expression as written.
    pub expression: Arc<str>,
    /// Its estimated steps.
    pub estimate: u64,
    /// The longest list or map among the values it reads.
    pub collection: usize,
    /// The longest string among them, in bytes.
    pub string: usize,
}

/// The longest list or map and the longest string among some values: what bounds the work
/// of an expression that reads them.
#[derive(Clone, Copy, Debug, Default)]
struct Sizes {
    collection: usize,
    string: usize,
}

impl Sizes {
    fn add_json(&mut self, value: &Value) {
        match value {
            Value::String(text) => self.string = self.string.max(text.len()),
            Value::Array(items) => {
                self.collection = self.collection.max(items.len());
                items.iter().for_each(|item| self.add_json(item));
            }
            Value::Object(map) => self.add_map(map),
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }

    fn add_map(&mut self, map: &Map<String, Value>) {
        self.collection = self.collection.max(map.len());
        for (key, value) in map {
            self.string = self.string.max(key.len());
            self.add_json(value);
        }
    }

    fn add_list<S: AsRef<str>>(&mut self, items: &[S]) {
        self.collection = self.collection.max(items.len());
        for item in items {
            self.string = self.string.max(item.as_ref().len());
        }
    }
}

/// The rules that fired, for coverage: each recorded by its address inside its compiled
/// template (a [`CompiledRule`] of a rule list, or an element of `outcome.rules`). Compiled
/// templates are immutable and shared, so the address names one rule of one revision for
/// as long as the template lives; whoever reads the log holds the templates it ran.
/// Recorded when a conversation carries a log ([`Conversation::rule_log`]), which only
/// tools set; a step that is run again (on the hook pool, after a lost race) may record a
/// rule twice, which a set of addresses absorbs.
#[derive(Debug, Default)]
pub struct RuleLog {
    fired: std::sync::Mutex<std::collections::HashSet<usize>>,
}

impl RuleLog {
    fn record<T>(&self, rule: &T) {
        self.fired
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(std::ptr::from_ref(rule) as usize);
    }

    /// The addresses of the rules that fired so far.
    pub fn fired(&self) -> std::collections::HashSet<usize> {
        self.fired
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// What an expression is, for an error naming it.
pub enum Origin<'a> {
    /// A routing or lifecycle rule.
    Rule(&'a str),
    /// The guard of a transition.
    Guard {
        /// The state it leaves.
        state: &'a str,
        /// Its trigger.
        performative: &'a str,
    },
    /// `outcome.rules[index]`.
    Outcome(usize),
}

impl fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Rule(name) => write!(f, "rule `{name}`"),
            Origin::Guard {
                state,
                performative,
            } => write!(
                f,
                "the guard of the `{performative}` transition out of state `{state}`"
            ),
            Origin::Outcome(index) => write!(f, "outcome.rules[{index}]"),
        }
    }
}

/// The variables of a scope as CEL sees them, with the sizes of those values when some
/// expression needs its cost bounded.
struct Variables {
    context: cel::Context<'static, 'static>,
    sizes: Option<Sizes>,
}

impl Scope<'_> {
    /// The CEL variables `reads` asks for. Each one is converted from engine state on every
    /// evaluation, so the ones no expression reads are left out. With `measure`, the sizes
    /// of those values are taken as well.
    fn variables(&self, reads: &dyn Fn(&str) -> bool, measure: bool) -> Variables {
        let conversation = self.conversation;
        let started = &conversation.started;
        let mut sizes = measure.then(Sizes::default);
        let mut measure = |add: &dyn Fn(&mut Sizes)| {
            if let Some(sizes) = sizes.as_mut() {
                add(sizes);
            }
        };
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
        if reads("parameters") {
            measure(&|sizes| sizes.add_json(&started.parameters));
        }
        if reads("context") {
            measure(&|sizes| sizes.add_json(&started.context));
        }
        if reads("vars") {
            measure(&|sizes| sizes.add_map(&conversation.vars));
        }
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
            measure(&|sizes| {
                sizes.add_list(&started.participants);
                sizes.add_list(&[&started.id, &started.template, &started.revision]);
            });
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
            measure(&|sizes| {
                sizes.add_list(&started.participants);
            });
        }
        if let Some(message) = self.message {
            add("message", message);
            if reads("content") || reads("message") {
                let content = message.content.value();
                if reads("content") {
                    add("content", &content);
                }
                measure(&|sizes| {
                    sizes.add_json(&content);
                    sizes.add_list(&message.receivers);
                    sizes.add_list(&[&message.id, &message.sender]);
                });
            }
            add("sender", &&*message.sender);
            add("performative", &message.performative.name());
            if reads("sender") || reads("performative") {
                measure(&|sizes| {
                    sizes.add_list(&[&*message.sender, message.performative.name()]);
                });
            }
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
            measure(&|sizes| {
                sizes.add_list(timeout.participant.as_slice());
            });
        }
        Variables { context, sizes }
    }

    /// Evaluates a condition. A runtime error (a missing key, a type mismatch) counts as
    /// false and is logged: one bad message must not wedge a conversation. An expression
    /// too costly for these values is not evaluated.
    pub fn holds(&self, expression: &Expression, origin: &Origin<'_>) -> Result<bool, TooCostly> {
        let variables = self.variables(
            &|name| expression.reads(name),
            expression.cost.needs_bound(),
        );
        self.holds_in(&variables, expression, origin)
    }

    /// The value paired with the first condition that holds (`None` holds always), with
    /// the variables built once for all of them.
    pub fn first_match<'r, T>(
        &self,
        rules: &'r [(Option<Expression>, T)],
    ) -> Result<Option<&'r T>, TooCostly> {
        if rules.is_empty() {
            return Ok(None);
        }
        let expressions = || rules.iter().filter_map(|(when, _)| when.as_ref());
        let variables = self.variables(
            &|name| expressions().any(|when| when.reads(name)),
            expressions().any(|when| when.cost.needs_bound()),
        );
        for (index, rule) in rules.iter().enumerate() {
            let (when, value) = rule;
            let holds = match when {
                None => true,
                Some(when) => self.holds_in(&variables, when, &Origin::Outcome(index))?,
            };
            if holds {
                if let Some(log) = &self.conversation.rule_log {
                    log.record(rule);
                }
                return Ok(Some(value));
            }
        }
        Ok(None)
    }

    /// Refuses `expression` when its estimated cost over `variables` is over the budget.
    fn check_cost(
        &self,
        variables: &Variables,
        expression: &Expression,
        origin: &Origin<'_>,
    ) -> Result<(), TooCostly> {
        let (Some(sizes), true) = (variables.sizes, expression.cost.needs_bound()) else {
            return Ok(());
        };
        let estimate = expression.cost.estimate(sizes.collection, sizes.string);
        if estimate <= CEL_STEP_BUDGET {
            return Ok(());
        }
        Err(TooCostly {
            template: self.conversation.started.template.to_string(),
            rule: origin.to_string(),
            expression: expression.source.clone(),
            estimate,
            collection: sizes.collection,
            string: sizes.string,
        })
    }

    fn holds_in(
        &self,
        variables: &Variables,
        expression: &Expression,
        origin: &Origin<'_>,
    ) -> Result<bool, TooCostly> {
        self.check_cost(variables, expression, origin)?;
        Ok(match expression.program.execute(&variables.context) {
            Ok(cel::Value::Bool(value)) => value,
            Ok(other) => {
                tracing::warn!(conversation = %self.conversation.started.id, expression = %expression.source, value = ?other, "condition is not a boolean; treated as false");
                false
            }
            Err(error) => {
                tracing::warn!(conversation = %self.conversation.started.id, expression = %expression.source, %error, "condition failed; treated as false");
                false
            }
        })
    }

    fn evaluate(
        &self,
        variables: &Variables,
        expression: &Expression,
        origin: &Origin<'_>,
    ) -> Result<Value, TooCostly> {
        self.check_cost(variables, expression, origin)?;
        let value = match expression.program.execute(&variables.context) {
            Ok(value) => value,
            Err(error) => {
                tracing::warn!(conversation = %self.conversation.started.id, expression = %expression.source, %error, "expression failed; stored as null");
                return Ok(Value::Null);
            }
        };
        Ok(match value.json() {
            Ok(json) => json,
            Err(error) => {
                tracing::warn!(conversation = %self.conversation.started.id, expression = %expression.source, %error, "value has no JSON form; stored as null");
                Value::Null
            }
        })
    }

    /// Runs every matching rule of `rules` and collects their actions into `effects`. Stops
    /// at the first expression too costly for these values.
    pub fn run_rules(
        &self,
        rules: &[CompiledRule],
        effects: &mut Effects,
    ) -> Result<(), TooCostly> {
        if rules.is_empty() {
            return Ok(());
        }
        let variables = self.variables(
            &|name| rules.iter().any(|rule| rule_reads(rule, name)),
            rules
                .iter()
                .any(|rule| rule_expressions(rule).any(|e| e.cost.needs_bound())),
        );
        for rule in rules {
            if let Some(message) = self.message
                && !rule.performatives.is_empty()
                && !rule.performatives.contains(&message.performative)
            {
                continue;
            }
            let origin = Origin::Rule(&rule.name);
            if let Some(when) = &rule.when
                && !self.holds_in(&variables, when, &origin)?
            {
                continue;
            }
            if let Some(log) = &self.conversation.rule_log {
                log.record(rule);
            }
            for action in &rule.then {
                match action {
                    CompiledAction::Literal(action) => effects.add(&rule.name, action.clone()),
                    CompiledAction::EvalVars(expressions) => {
                        for (name, expression) in expressions {
                            let value = self.evaluate(&variables, expression, &origin)?;
                            effects.vars.insert(name.clone(), value);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Every expression of a rule: its condition and its computed values.
fn rule_expressions(rule: &CompiledRule) -> impl Iterator<Item = &Expression> {
    rule.when.iter().chain(rule.then.iter().flat_map(|action| {
        match action {
            CompiledAction::Literal(_) => [].iter(),
            CompiledAction::EvalVars(expressions) => expressions.iter(),
        }
        .map(|(_, expression)| expression)
    }))
}

/// Whether a rule's condition or one of its computed values reads the variable `name`.
fn rule_reads(rule: &CompiledRule, name: &str) -> bool {
    rule_expressions(rule).any(|expression| expression.reads(name))
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

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use colloquy_policy::{CompiledTemplate, TemplateCompiler};
    use colloquy_protocol::event::Started;
    use colloquy_protocol::message::Content;
    use colloquy_protocol::performative::Performative;
    use serde_json::json;

    use super::*;

    /// The policy manager's minimal template with these routing rules.
    fn template(routing: &str) -> Arc<CompiledTemplate> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../policy-manager/fixtures/valid/minimal.yaml");
        let source = std::fs::read_to_string(path).expect("fixture exists") + routing;
        Arc::new(
            TemplateCompiler::new()
                .compile_str(&source, None)
                .unwrap_or_else(|diagnostics| panic!("{diagnostics}")),
        )
    }

    fn conversation(template: Arc<CompiledTemplate>) -> Conversation {
        let started = Started {
            id: Arc::from("c-1"),
            template: template.name.clone(),
            revision: template.revision.clone(),
            initiator: Arc::from("alice"),
            participants: vec![Arc::from("bob")],
            parameters: json!({}),
            context: json!({}),
            deadline: None,
            trace: None,
        };
        Conversation::new(template, Arc::new(started))
    }

    fn request(content: Value) -> Message {
        Message {
            id: Arc::from("m-1"),
            performative: Performative::parse("request").expect("a FIPA act"),
            sender: Arc::from("alice"),
            receivers: vec![Arc::from("bob")],
            content: Content::from_value(&content),
            in_reply_to: None,
            reply_by: None,
            sent_at: 0,
            signature: None,
        }
    }

    /// Runs the template's routing rules over a request carrying `items`.
    fn route(template: &Arc<CompiledTemplate>, items: &[u64]) -> Result<Effects, TooCostly> {
        let conversation = conversation(template.clone());
        let message = request(json!({ "items": items }));
        let scope = Scope {
            conversation: &conversation,
            message: Some(&message),
            timeout: None,
            now: 0,
        };
        let mut effects = Effects::default();
        scope.run_rules(&template.routing, &mut effects)?;
        Ok(effects)
    }

    #[test]
    fn a_quadratic_rule_over_a_long_list_is_refused_before_it_runs() {
        let template = template(
            "  routing:\n    - name: pairs\n      when: \"content.items.exists(x, \
             content.items.exists(y, x == y + 100000000u))\"\n      then: [{ reject: { reason: pair } }]\n",
        );
        let started = Instant::now();
        let refused = route(&template, &(0..4_000).collect::<Vec<_>>())
            .expect_err("4,000 items squared is over the budget");
        // Evaluated, this takes seconds even in release builds; refused, it takes the time
        // of building the variables. A generous bound that only a run of the loop exceeds.
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(refused.rule, "rule `pairs`");
        assert_eq!(refused.template, "minimal");
        assert_eq!(refused.collection, 4_000);
        assert!(refused.estimate > CEL_STEP_BUDGET);
        let text = refused.to_string();
        assert!(
            text.contains("content.items.exists(x, content.items.exists(y"),
            "{text}"
        );
        // Over a short list it runs, and holds.
        let effects = route(&template, &[1, 100_000_001]).expect("within the budget");
        assert_eq!(
            effects.reject,
            Some(("pairs".to_owned(), "pair".to_owned()))
        );
    }

    #[test]
    fn a_single_loop_over_an_ordinary_list_runs() {
        let template = template(
            "  routing:\n    - name: big\n      when: \"content.items.exists(x, x > 500)\"\n      \
             then: [{ reject: { reason: big } }]\n",
        );
        let effects = route(&template, &(0..1_000).collect::<Vec<_>>()).expect("linear");
        assert_eq!(effects.reject, Some(("big".to_owned(), "big".to_owned())));
        let effects = route(&template, &(0..100).collect::<Vec<_>>()).expect("linear");
        assert_eq!(effects.reject, None);
    }
}
