//! Compiled templates: what the engine runs. Built only by the [`crate::compiler`], so every
//! reference in here is resolved (state names are indices) and every schema and expression
//! has been compiled once.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use colloquy_protocol::action::Action;
use colloquy_protocol::conversation::{CommitmentState, Outcome};
use colloquy_protocol::performative::Performative;
use colloquy_protocol::template::{
    CompleteWhen, ContextSpec, Enforcement, HookSpec, LateAction, ReplyBySpec, Role, Template,
};

/// A template ready to run: immutable, shared by every conversation pinned to its revision.
#[derive(Debug)]
pub struct CompiledTemplate {
    /// `metadata.name`.
    pub name: Arc<str>,
    /// Content hash of the YAML and of its hook module's bytes: `sha256:<hex>`.
    pub revision: Arc<str>,
    /// The file it was read from, when it came from a file.
    pub source_path: Option<PathBuf>,
    /// The parsed document, as written.
    pub source: Template,
    /// Out-of-protocol policy.
    pub enforcement: Enforcement,
    /// Whether parties must sign their messages.
    pub signatures: colloquy_protocol::template::Signatures,
    /// Minimum participants.
    pub min_participants: u32,
    /// Maximum participants, if capped.
    pub max_participants: Option<u32>,
    /// Template-declared intents (besides the 22 FIPA acts).
    pub intents: Vec<Performative>,
    /// Validator of the start parameters.
    pub parameters_schema: Option<JsonSchema>,
    /// Validators of message content, by performative.
    pub content_schemas: HashMap<Performative, JsonSchema>,
    /// The thread state machine.
    pub machine: StateMachine,
    /// Completion and outcome rules.
    pub outcome: OutcomeRules,
    /// Default conversation deadline.
    pub conversation_deadline_ms: Option<u64>,
    /// Commitment rules.
    pub commitments: Vec<CommitmentRule>,
    /// Routing rules.
    pub routing: Vec<CompiledRule>,
    /// Declarative `on_start` rules.
    pub on_start: Vec<CompiledRule>,
    /// Declarative `on_message` rules.
    pub on_message: Vec<CompiledRule>,
    /// Declarative `on_timeout` rules.
    pub on_timeout: Vec<CompiledRule>,
    /// The wasm hook section, as written (run by the engine's hook runtime).
    pub hooks: Option<HookSpec>,
    /// The hook module's bytes, read when the template was compiled from a file. `None`
    /// without hooks, and for templates compiled from text without an origin (whose module
    /// cannot be located): the engine then fails the hook under the template's policy.
    pub hook_module: Option<Arc<HookModule>>,
    /// Context cap.
    pub context: ContextSpec,
    /// The most messages a conversation records (`spec.limits.max_messages`), if bounded.
    pub max_messages: Option<u32>,
}

impl CompiledTemplate {
    /// The performative this template knows by `name`: a FIPA act or a declared intent.
    pub fn performative(&self, name: &str) -> Option<Performative> {
        match Performative::parse(name)? {
            Performative::Intent(intent) => self
                .intents
                .iter()
                .find(|known| known.name() == &*intent)
                .cloned(),
            fipa => Some(fipa),
        }
    }
}

/// A hook module as the compiler read it. Only its framing is checked here (wasm magic,
/// core-module version, size); linking (exports, ABI version, imports) is the engine's hook
/// runtime's job, the only place that knows wasmtime.
pub struct HookModule {
    /// The file it was read from.
    pub path: PathBuf,
    /// Its bytes.
    pub bytes: Arc<[u8]>,
    /// SHA-256 of the bytes, lowercase hex: the key of the engine's compiled-module caches.
    pub sha256: Arc<str>,
}

impl fmt::Debug for HookModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookModule")
            .field("path", &self.path)
            .field("bytes", &self.bytes.len())
            .field("sha256", &self.sha256)
            .finish()
    }
}

/// A compiled JSON Schema together with the schema it came from.
pub struct JsonSchema {
    /// The schema as written.
    pub source: serde_json::Value,
    /// The compiled validator.
    pub validator: jsonschema::Validator,
}

impl fmt::Debug for JsonSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonSchema")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// A compiled CEL expression together with its source text.
pub struct Expression {
    /// The expression as written.
    pub source: Arc<str>,
    /// The compiled program.
    pub program: cel::Program,
    /// The variables it reads (those comprehensions bind excluded), so an evaluator
    /// builds only these.
    pub variables: BTreeSet<String>,
    /// What evaluating it can cost, for the engine's bound.
    pub cost: CostShape,
}

/// Element comparisons (or copies) that cost as much as one interpreter step (evaluating one
/// node of the syntax tree). A sized operation (`x in list`, `a == b`, `a + b`) walks its
/// operands in native code, with no environment lookups or value boxing per element, so it
/// is cheaper per element than the interpreter is per node; 4 is a cautious guess, not yet
/// measured.
pub const ELEMENTS_PER_STEP: u64 = 4;

/// String bytes that count as one element for a sized operation (`contains`, `==`, `+` on
/// strings compare or copy bytes with memchr/memcmp speeds).
pub const BYTES_PER_ELEMENT: u64 = 64;

/// What evaluating an expression can cost, read from its syntax tree by the compiler. A CEL
/// evaluation cannot be interrupted once started, so the engine bounds it beforehand with
/// [`CostShape::estimate`] over the sizes of the values it will read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CostShape {
    /// How deeply comprehensions (`all`, `exists`, `map`, ...) run inside each other's
    /// loops; 0 without comprehensions. One in another's range runs once and does not nest.
    pub nesting: u32,
    /// Nodes of the syntax tree, macros expanded: the steps of one pass.
    pub nodes: u32,
    /// The loop depth of the deepest sized operation (`in`, `==`, `!=`, `+` on two values
    /// from outside the expression), plus one; 0 without one. Such an operation's time grows
    /// with its operands, so inside a loop over a list it multiplies the work by the length
    /// of the longest list (or string) once more.
    pub sized_degree: u32,
    /// The same for operations that grow with strings only (ordering, `contains`,
    /// `startsWith`, `endsWith`).
    pub string_degree: u32,
}

impl CostShape {
    /// Whether an evaluation can cost more than linear time in its inputs, so that the
    /// engine must bound it: only loops do that (without them each node runs once).
    pub fn needs_bound(&self) -> bool {
        self.nesting > 0
    }

    /// An upper estimate of the interpreter steps of one evaluation, given the length of the
    /// longest list or map (`collection`) and the longest string in bytes (`string`) among
    /// the values it reads. Each loop runs at most `collection + 1` times (lists built
    /// inside the expression are at most a few times longer: `nodes` covers that), and each
    /// sized operation inside one walks at most the longest value.
    pub fn estimate(&self, collection: usize, string: usize) -> u64 {
        let nodes = u64::from(self.nodes);
        let collection = u64::try_from(collection)
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let string = u64::try_from(string).unwrap_or(u64::MAX) / BYTES_PER_ELEMENT;
        let loops = nodes.saturating_mul(collection.saturating_pow(self.nesting));
        // A sized operation at loop depth `degree - 1` runs `collection^(degree - 1)` times
        // and walks `longest` elements each time.
        let sized = |degree: u32, longest: u64| match degree {
            0 => 0,
            degree => {
                nodes
                    .saturating_mul(collection.saturating_pow(degree - 1))
                    .saturating_mul(longest)
                    / ELEMENTS_PER_STEP
            }
        };
        loops
            .saturating_add(sized(
                self.sized_degree,
                collection.max(string.saturating_add(1)),
            ))
            .saturating_add(sized(self.string_degree, string.saturating_add(1)))
    }
}

impl Expression {
    /// Whether it reads the variable `name`.
    pub fn reads(&self, name: &str) -> bool {
        self.variables.contains(name)
    }
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Expression({:?})", self.source)
    }
}

/// Index of a state in [`StateMachine::states`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateId(pub u16);

/// The per-participant thread state machine, names resolved to [`StateId`]s.
#[derive(Debug)]
pub struct StateMachine {
    /// Every state; a [`StateId`] indexes this.
    pub states: Vec<State>,
    /// Where threads start.
    pub initial: StateId,
    /// Where open threads go when the conversation deadline passes (terminal).
    pub on_expiry: StateId,
}

impl StateMachine {
    /// The state with this id. Ids come from this machine, so the index is in range.
    pub fn state(&self, id: StateId) -> &State {
        &self.states[usize::from(id.0)]
    }

    /// The id of the state with this name.
    pub fn id_of(&self, name: &str) -> Option<StateId> {
        self.states
            .iter()
            .position(|state| &*state.name == name)
            .and_then(|index| u16::try_from(index).ok())
            .map(StateId)
    }
}

/// One state.
#[derive(Debug)]
pub struct State {
    /// Its name in the template.
    pub name: Arc<str>,
    /// `Some` for terminal states.
    pub terminal: Option<Outcome>,
    /// Moves out of it, in template order.
    pub transitions: Vec<Transition>,
    /// Where the thread goes when its reply-by passes here.
    pub on_deadline: Option<StateId>,
    /// What late messages get here.
    pub late: Option<LatePolicy>,
}

/// One move.
#[derive(Debug)]
pub struct Transition {
    /// Trigger.
    pub performative: Performative,
    /// Who must send it.
    pub from: Role,
    /// Destination.
    pub to: StateId,
    /// Optional guard.
    pub guard: Option<Expression>,
    /// Deadline the destination gets.
    pub reply_by: Option<ReplyBySpec>,
}

/// What a late message gets.
#[derive(Debug)]
pub struct LatePolicy {
    /// Flag or reject.
    pub action: LateAction,
    /// With reject: the automatic answer's performative.
    pub reply: Option<Performative>,
    /// With reject: the reason in the answer's content.
    pub reason: Option<String>,
}

/// Completion and outcome rules.
#[derive(Debug, Default)]
pub struct OutcomeRules {
    /// When the conversation completes.
    pub complete_when: CompleteWhen,
    /// Ordered rules; `None` condition = always.
    pub rules: Vec<(Option<Expression>, Outcome)>,
}

/// A commitment rule.
#[derive(Debug)]
pub struct CommitmentRule {
    /// Its name.
    pub name: Arc<str>,
    /// Who owes it.
    pub debtor: Role,
    /// To whom.
    pub creditor: Role,
    /// The creating performative.
    pub created_by: Performative,
    /// Who sends the creating performative.
    pub created_from: Role,
    /// State on creation.
    pub initial: CommitmentState,
    /// Moves, in order.
    pub transitions: Vec<CommitmentTransition>,
    /// Deadline.
    pub deadline: Option<CommitmentDeadline>,
}

/// A commitment move.
#[derive(Debug)]
pub struct CommitmentTransition {
    /// Trigger.
    pub performative: Performative,
    /// Who must send it (`None`: either party).
    pub from: Option<Role>,
    /// Source states (empty: every non-terminal state).
    pub states: Vec<CommitmentState>,
    /// Thread states the thread must be in before the message (empty: any).
    pub thread_states: Vec<StateId>,
    /// Destination.
    pub to: CommitmentState,
}

/// A commitment deadline.
#[derive(Debug)]
pub struct CommitmentDeadline {
    /// Milliseconds after arming.
    pub after_ms: u64,
    /// States in which the clock runs.
    pub armed_in: Vec<CommitmentState>,
    /// Prefer the arming message's `reply_by`.
    pub from_reply_by: bool,
}

/// A routing or lifecycle rule.
#[derive(Debug)]
pub struct CompiledRule {
    /// Its name, or `<section>[<index>]`.
    pub name: Arc<str>,
    /// Performative filter (empty: every one).
    pub performatives: Vec<Performative>,
    /// Condition (`None`: always).
    pub when: Option<Expression>,
    /// Actions, in order.
    pub then: Vec<CompiledAction>,
}

/// An action ready to run.
#[derive(Debug)]
pub enum CompiledAction {
    /// Any action whose fields are literal values.
    Literal(Action),
    /// `eval_vars`: variable name → compiled expression.
    EvalVars(Vec<(String, Expression)>),
}
