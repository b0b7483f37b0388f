//! A thread's state machine: its states, their transitions and deadlines, and which of
//! them can be reached.

use std::collections::VecDeque;
use std::sync::Arc;

use colloquy_protocol::template::{LateAction, StateSpec, ThreadSpec};

use super::super::diagnostic::closest;
use super::super::expressions::Scope;
use crate::compiled::{LatePolicy, State, StateId, StateMachine, Transition};

use super::*;

impl Resolver<'_> {
    /// Checks and resolves the thread machine; `None` when anything in it is wrong.
    pub(super) fn machine(&mut self, thread: &ThreadSpec) -> Option<StateMachine> {
        let problems_before = self.problems.len();
        let names: Vec<&str> = thread.states.keys().map(String::as_str).collect();
        if names.len() > MAX_STATES {
            self.error(
                "spec.thread.states",
                format!(
                    "the thread has {} states; the limit is {MAX_STATES}",
                    names.len()
                ),
                None,
            );
            return None;
        }
        let id_of = |name: &str| state_id(&names, name);
        let initial = self.state_ref(&names, &thread.initial, "spec.thread.initial", id_of);
        let on_expiry = self.state_ref(&names, &thread.on_expiry, "spec.thread.on_expiry", id_of);
        if let Some(state) = thread.states.get(&thread.on_expiry)
            && state.terminal.is_none()
        {
            self.error(
                "spec.thread.on_expiry",
                format!("on_expiry state `{}` is not terminal", thread.on_expiry),
                Some("threads still open at the conversation deadline end there; give it `terminal: timeout`".into()),
            );
        }
        if !thread.states.values().any(|state| state.terminal.is_some()) {
            self.error(
                "spec.thread.states",
                "the thread has no terminal state",
                Some("mark at least one state with `terminal: <outcome>`".into()),
            );
        }
        let mut states = Vec::with_capacity(names.len());
        for (name, spec) in &thread.states {
            states.push(self.state(&names, name, spec, id_of));
        }
        if let (Some(initial), Some(on_expiry)) = (initial, on_expiry) {
            self.reachability(thread, &names, initial, on_expiry, id_of);
        }
        if self.problems.len() != problems_before {
            return None;
        }
        Some(StateMachine {
            states,
            initial: initial?,
            on_expiry: on_expiry?,
        })
    }

    /// Resolves a state name used at `path`.
    pub(super) fn state_ref(
        &mut self,
        names: &[&str],
        name: &str,
        path: &str,
        id_of: impl Fn(&str) -> Option<StateId>,
    ) -> Option<StateId> {
        let id = id_of(name);
        if id.is_none() {
            let suggestion = closest(name, names.iter().copied())
                .map(|close| format!("did you mean `{close}`? "))
                .unwrap_or_default();
            let mut listed: Vec<&str> = names.iter().copied().take(MAX_LISTED_STATES).collect();
            if names.len() > MAX_LISTED_STATES {
                listed.push("...");
            }
            self.error(
                path,
                format!("state `{name}` does not exist"),
                Some(format!("{suggestion}known states: {}", listed.join(", "))),
            );
        }
        id
    }

    pub(super) fn state(
        &mut self,
        names: &[&str],
        name: &str,
        spec: &StateSpec,
        id_of: impl Fn(&str) -> Option<StateId> + Copy,
    ) -> State {
        let path = format!("spec.thread.states.{name}");
        if spec.terminal.is_some() {
            if !spec.transitions.is_empty() {
                self.error(
                    format!("{path}.transitions"),
                    format!("terminal state `{name}` has transitions"),
                    Some("terminal states absorb every later message; remove the transitions or `terminal`".into()),
                );
            }
            if spec.on_deadline.is_some() {
                self.error(
                    format!("{path}.on_deadline"),
                    format!("terminal state `{name}` has an on_deadline"),
                    Some("a terminal thread has no deadline left to pass".into()),
                );
            }
        } else {
            if spec.late.is_some() {
                self.error(
                    format!("{path}.late"),
                    "`late` is only allowed on terminal states",
                    Some("late messages are those that arrive after a thread has ended".into()),
                );
            }
            if spec.transitions.is_empty() && spec.on_deadline.is_none() {
                self.error(
                    path.clone(),
                    format!(
                        "state `{name}` is a dead end: it is not terminal and nothing leaves it"
                    ),
                    Some(
                        "add transitions or an `on_deadline`, or make it `terminal: <outcome>`"
                            .into(),
                    ),
                );
            }
        }

        let mut transitions = Vec::new();
        for (index, transition) in spec.transitions.iter().enumerate() {
            let path = format!("{path}.transitions[{index}]");
            let shadowed_by = spec.transitions[..index].iter().position(|earlier| {
                earlier.when.is_none()
                    && earlier.performative == transition.performative
                    && earlier.from == transition.from
            });
            if let Some(earlier) = shadowed_by {
                self.error(
                    path.clone(),
                    "this transition can never fire".to_owned(),
                    Some(format!(
                        "transitions[{earlier}] has the same performative and sender and no \
                         `when` guard, so it always wins; guard it or remove this one"
                    )),
                );
            }
            let performative =
                self.performative(&transition.performative, &format!("{path}.performative"));
            let to = self.state_ref(names, &transition.to, &format!("{path}.to"), id_of);
            let guard = transition
                .when
                .as_ref()
                .map(|source| self.expression(source, &format!("{path}.when"), Scope::Message));
            if transition
                .reply_by
                .as_ref()
                .is_some_and(|reply_by| reply_by.default_ms == Some(0))
            {
                self.positive(&format!("{path}.reply_by.default_ms"));
            }
            if let (Some(performative), Some(to), Some(guard)) = (
                performative,
                to,
                guard.map_or(Some(None), |guard| guard.map(Some)),
            ) {
                transitions.push(Transition {
                    performative,
                    from: transition.from,
                    to,
                    guard,
                    reply_by: transition.reply_by.clone(),
                });
            }
        }
        let on_deadline = spec.on_deadline.as_ref().and_then(|target| {
            self.state_ref(names, target, &format!("{path}.on_deadline"), id_of)
        });
        let late = spec.late.as_ref().map(|late| {
            let late_path = format!("{path}.late");
            let reply = match (late.action, &late.reply) {
                (LateAction::Reject, Some(reply)) => {
                    self.performative(reply, &format!("{late_path}.reply"))
                }
                (LateAction::Reject, None) => {
                    self.error(
                        late_path.clone(),
                        "`action: reject` needs a `reply` performative",
                        Some("e.g. `reply: reject-proposal`, or use `action: flag`".into()),
                    );
                    None
                }
                (LateAction::Flag, Some(_)) => {
                    self.error(
                        format!("{late_path}.reply"),
                        "`reply` is only used with `action: reject`",
                        Some("`flag` records a violation without answering".into()),
                    );
                    None
                }
                (LateAction::Flag, None) => None,
            };
            if late.action == LateAction::Flag && late.reason.is_some() {
                self.error(
                    format!("{late_path}.reason"),
                    "`reason` is only used with `action: reject`",
                    Some("`flag` records a violation without answering".into()),
                );
            }
            LatePolicy {
                action: late.action,
                reply,
                reason: late.reason.clone(),
            }
        });
        State {
            name: Arc::from(name),
            terminal: spec.terminal,
            transitions,
            on_deadline,
            late,
        }
    }

    /// Every state must be reachable from `initial` (or be `on_expiry`, which the
    /// conversation deadline reaches).
    pub(super) fn reachability(
        &mut self,
        thread: &ThreadSpec,
        names: &[&str],
        initial: StateId,
        on_expiry: StateId,
        id_of: impl Fn(&str) -> Option<StateId>,
    ) {
        let specs: Vec<&StateSpec> = thread.states.values().collect();
        let mut reached = vec![false; names.len()];
        let mut queue = VecDeque::from([initial, on_expiry]);
        while let Some(id) = queue.pop_front() {
            let index = usize::from(id.0);
            if std::mem::replace(&mut reached[index], true) {
                continue;
            }
            let spec = specs[index];
            let targets = spec
                .transitions
                .iter()
                .map(|transition| transition.to.as_str())
                .chain(spec.on_deadline.as_deref());
            queue.extend(targets.filter_map(&id_of));
        }
        for (index, name) in names.iter().enumerate() {
            if reached[index] {
                continue;
            }
            let kind = if specs[index].terminal.is_some() {
                "terminal state"
            } else {
                "state"
            };
            self.error(
                format!("spec.thread.states.{name}"),
                format!(
                    "{kind} `{name}` is unreachable from the initial state `{}`",
                    thread.initial
                ),
                Some(
                    "no transition or on_deadline leads to it; add one or remove the state".into(),
                ),
            );
        }
    }
}
