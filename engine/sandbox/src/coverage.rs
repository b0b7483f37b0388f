//! Coverage of templates by conversations: which states were entered, which transitions
//! taken, which rules fired, which commitment states reached, out of all the template has,
//! with the unreached ones placed at their file:line in the template.
//!
//! Read from the conversations' events (states, transitions, commitments) and from the
//! engine's rule log (rules, which leave no event of their own).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use colloquy_policy::CompiledTemplate;
use colloquy_policy::locations::Locations;
use colloquy_protocol::conversation::CommitmentState;
use colloquy_protocol::event::{ConversationEvent, EventKind, ThreadTransition};
use colloquy_protocol::template::Role;

/// What kind of thing an item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A thread state.
    State,
    /// A thread transition (a message's, a deadline's, or the conversation deadline's).
    Transition,
    /// A routing, lifecycle or outcome rule.
    Rule,
    /// A state a commitment can be in.
    CommitmentState,
}

impl Kind {
    /// All kinds, in report order.
    pub const ALL: [Kind; 4] = [
        Kind::State,
        Kind::Transition,
        Kind::Rule,
        Kind::CommitmentState,
    ];

    /// Its name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Kind::State => "states",
            Kind::Transition => "transitions",
            Kind::Rule => "rules",
            Kind::CommitmentState => "commitment states",
        }
    }
}

/// One thing of a template that a conversation may reach.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Item {
    /// What it is.
    pub kind: Kind,
    /// Its path in the template, e.g. `spec.thread.states.agreed.transitions[1]`.
    pub path: String,
    /// How a reader knows it, e.g. `agreed --inform/participant--> done`.
    pub label: String,
    /// Where it is written, 1-based, when the template came from a file.
    pub line: Option<usize>,
    /// Column, 1-based.
    pub column: Option<usize>,
    /// Whether some conversation reached it.
    pub reached: bool,
}

/// One template's coverage.
#[derive(Debug, serde::Serialize)]
pub struct TemplateCoverage {
    /// The template's name.
    pub template: String,
    /// Its file, when it came from one.
    pub file: Option<PathBuf>,
    /// Every item, in template order, kind by kind.
    pub items: Vec<Item>,
    #[serde(skip)]
    index: HashMap<Key, usize>,
    /// Rule addresses in the compiled template, to their item.
    #[serde(skip)]
    rules: HashMap<usize, usize>,
}

/// How events name an item.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    State(String),
    Transition { state: String, index: usize },
    Deadline(String),
    Expiry,
    Commitment(String, CommitmentState),
}

impl TemplateCoverage {
    /// Every item of `template`, none reached yet.
    pub fn of(template: &Arc<CompiledTemplate>) -> TemplateCoverage {
        let source = template
            .source_path
            .as_ref()
            .and_then(|path| std::fs::read_to_string(path).ok());
        let locations = source.as_deref().map(Locations::index);
        let mut coverage = TemplateCoverage {
            template: template.name.to_string(),
            file: template.source_path.clone(),
            items: Vec::new(),
            index: HashMap::new(),
            rules: HashMap::new(),
        };
        let add = |coverage: &mut TemplateCoverage,
                   kind,
                   path: String,
                   label: String,
                   key: Option<Key>| {
            let at = locations.as_ref().and_then(|l| l.nearest(&path));
            if let Some(key) = key {
                coverage.index.insert(key, coverage.items.len());
            }
            coverage.items.push(Item {
                kind,
                path,
                label,
                line: at.map(|at| at.line),
                column: at.map(|at| at.column),
                reached: false,
            });
            coverage.items.len() - 1
        };
        let spec = &template.source.spec;
        for name in spec.thread.states.keys() {
            add(
                &mut coverage,
                Kind::State,
                format!("spec.thread.states.{name}"),
                name.clone(),
                Some(Key::State(name.clone())),
            );
        }
        for (name, state) in &spec.thread.states {
            for (index, transition) in state.transitions.iter().enumerate() {
                let role = role_name(transition.from);
                let when = if transition.when.is_some() {
                    " (guarded)"
                } else {
                    ""
                };
                add(
                    &mut coverage,
                    Kind::Transition,
                    format!("spec.thread.states.{name}.transitions[{index}]"),
                    format!(
                        "{name} --{}/{role}{when}--> {}",
                        transition.performative, transition.to
                    ),
                    Some(Key::Transition {
                        state: name.clone(),
                        index,
                    }),
                );
            }
            if let Some(to) = &state.on_deadline {
                add(
                    &mut coverage,
                    Kind::Transition,
                    format!("spec.thread.states.{name}.on_deadline"),
                    format!("{name} --reply-by passed--> {to}"),
                    Some(Key::Deadline(name.clone())),
                );
            }
        }
        if spec.deadlines.conversation_ms.is_some() {
            add(
                &mut coverage,
                Kind::Transition,
                "spec.thread.on_expiry".into(),
                format!(
                    "any state --conversation deadline--> {}",
                    spec.thread.on_expiry
                ),
                Some(Key::Expiry),
            );
        }
        let lists = [
            ("spec.routing", &template.routing),
            ("spec.actions.on_start", &template.on_start),
            ("spec.actions.on_message", &template.on_message),
            ("spec.actions.on_timeout", &template.on_timeout),
        ];
        for (list, rules) in lists {
            for (index, rule) in rules.iter().enumerate() {
                let path = format!("{list}[{index}]");
                let label = if *rule.name == path {
                    path.clone()
                } else {
                    format!("{} ({path})", rule.name)
                };
                let item = add(&mut coverage, Kind::Rule, path, label, None);
                coverage
                    .rules
                    .insert(std::ptr::from_ref(rule) as usize, item);
            }
        }
        for (index, rule) in template.outcome.rules.iter().enumerate() {
            let path = format!("spec.outcome.rules[{index}]");
            let label = format!("{path} → {}", rule.1.name());
            let item = add(&mut coverage, Kind::Rule, path, label, None);
            coverage
                .rules
                .insert(std::ptr::from_ref(rule) as usize, item);
        }
        for (index, commitment) in spec.commitments.iter().enumerate() {
            let mut states = vec![(
                commitment.initial,
                format!("spec.commitments[{index}].initial"),
            )];
            for (t, transition) in commitment.transitions.iter().enumerate() {
                states.push((
                    transition.to,
                    format!("spec.commitments[{index}].transitions[{t}]"),
                ));
            }
            if commitment.deadline.is_some() {
                states.push((
                    CommitmentState::Violated,
                    format!("spec.commitments[{index}].deadline"),
                ));
            }
            let mut seen = HashSet::new();
            for (state, path) in states {
                if seen.insert(state) {
                    add(
                        &mut coverage,
                        Kind::CommitmentState,
                        path,
                        format!("{}: {}", commitment.name, state.name()),
                        Some(Key::Commitment(commitment.name.clone(), state)),
                    );
                }
            }
        }
        coverage
    }

    /// Marks what one conversation of this template reached.
    pub fn add_conversation(&mut self, template: &CompiledTemplate, events: &[ConversationEvent]) {
        let spec = &template.source.spec;
        let mut initiator = String::new();
        let mut commitment_names: HashMap<String, String> = HashMap::new();
        // Each thread's reply-by, to tell a thread's own deadline from the conversation's.
        let mut reply_by: HashMap<String, u64> = HashMap::new();
        for event in events {
            match &event.kind {
                EventKind::Started(started) => {
                    initiator = started.initiator.to_string();
                    if !started.participants.is_empty() {
                        self.reach(&Key::State(spec.thread.initial.clone()));
                    }
                }
                EventKind::MessageAccepted {
                    message,
                    transitions,
                } => {
                    let role = if *message.sender == *initiator {
                        Role::Initiator
                    } else {
                        Role::Participant
                    };
                    for moved in transitions {
                        set_reply_by(&mut reply_by, &moved.participant, moved.deadline);
                        self.reach(&Key::State(moved.to.to_string()));
                        let taken = spec.thread.states.get(&*moved.from).and_then(|state| {
                            state.transitions.iter().position(|transition| {
                                transition.performative == message.performative.name()
                                    && transition.from == role
                                    && transition.to == *moved.to
                            })
                        });
                        if let Some(index) = taken {
                            self.reach(&Key::Transition {
                                state: moved.from.to_string(),
                                index,
                            });
                        }
                    }
                }
                EventKind::ThreadDeadlineSet {
                    participant,
                    deadline,
                } => {
                    set_reply_by(&mut reply_by, participant, *deadline);
                }
                EventKind::ThreadExpired(moved) => {
                    let own = reply_by
                        .get(&*moved.participant)
                        .is_some_and(|deadline| *deadline <= event.at);
                    self.expired(template, moved, own);
                    set_reply_by(&mut reply_by, &moved.participant, moved.deadline);
                }
                EventKind::CommitmentCreated(commitment) => {
                    commitment_names.insert(commitment.id.to_string(), commitment.name.to_string());
                    self.reach(&Key::Commitment(
                        commitment.name.to_string(),
                        commitment.state,
                    ));
                }
                EventKind::CommitmentMoved { id, to, .. } => {
                    if let Some(name) = commitment_names.get(&**id) {
                        self.reach(&Key::Commitment(name.clone(), *to));
                    }
                }
                _ => {}
            }
        }
    }

    /// Marks the rules among `fired` (addresses from the engine's rule log).
    pub fn add_rules(&mut self, fired: &HashSet<usize>) {
        for address in fired {
            if let Some(&item) = self.rules.get(address) {
                self.items[item].reached = true;
            }
        }
    }

    /// A thread moved by a deadline: its own reply-by (`own`) through its state's
    /// `on_deadline`, or the conversation's through `on_expiry`.
    fn expired(&mut self, template: &CompiledTemplate, moved: &ThreadTransition, own: bool) {
        self.reach(&Key::State(moved.to.to_string()));
        let by_reply_by = own
            && template
                .source
                .spec
                .thread
                .states
                .get(&*moved.from)
                .and_then(|state| state.on_deadline.as_deref())
                == Some(&*moved.to);
        if by_reply_by {
            self.reach(&Key::Deadline(moved.from.to_string()));
        } else {
            self.reach(&Key::Expiry);
        }
    }

    fn reach(&mut self, key: &Key) {
        if let Some(&item) = self.index.get(key) {
            self.items[item].reached = true;
        }
    }

    /// `(reached, total)` of one kind.
    pub fn count(&self, kind: Kind) -> (usize, usize) {
        let of_kind = self.items.iter().filter(|item| item.kind == kind);
        (
            of_kind.clone().filter(|item| item.reached).count(),
            of_kind.count(),
        )
    }

    /// `(reached, total)` of every item.
    pub fn total(&self) -> (usize, usize) {
        (
            self.items.iter().filter(|item| item.reached).count(),
            self.items.len(),
        )
    }
}

/// Coverage of several templates, by name.
#[derive(Debug, Default)]
pub struct Coverage {
    /// Each template's, by name (a template tested from several files is counted once).
    pub templates: BTreeMap<String, TemplateCoverage>,
}

impl Coverage {
    /// Marks what a conversation of `template` reached, and the rules that fired in it.
    pub fn add(
        &mut self,
        template: &Arc<CompiledTemplate>,
        events: &[ConversationEvent],
        rules: &HashSet<usize>,
    ) {
        let coverage = self
            .templates
            .entry(template.name.to_string())
            .or_insert_with(|| TemplateCoverage::of(template));
        coverage.add_conversation(template, events);
        coverage.add_rules(rules);
    }

    /// Percent of every item of every template reached (100 with nothing to reach).
    pub fn percent(&self) -> f64 {
        let (reached, total) = self.templates.values().fold((0, 0), |(r, t), coverage| {
            let (reached, total) = coverage.total();
            (r + reached, t + total)
        });
        if total == 0 {
            100.0
        } else {
            reached as f64 * 100.0 / total as f64
        }
    }
}

fn set_reply_by(reply_by: &mut HashMap<String, u64>, participant: &str, deadline: Option<u64>) {
    match deadline {
        Some(deadline) => reply_by.insert(participant.to_owned(), deadline),
        None => reply_by.remove(participant),
    };
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Initiator => "initiator",
        Role::Participant => "participant",
    }
}
