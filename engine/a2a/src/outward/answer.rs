//! What an agent's answer means in the conversation: the [`Answer`] read from a call, the
//! [`Verdict`] it carries, and the [`Reply`] it becomes where the agent's thread allows it;
//! and the other way, a Colloquy message as an A2A `message/send` ([`message_send`],
//! [`parts_of`]). No I/O: the calls are the parent module's.

use super::*;

/// What an answer of the remote agent amounts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Done, with a result (a `completed` task or a plain message).
    Done,
    /// It will not do it (`rejected`).
    Refused,
    /// It tried and failed, or the task was cancelled (`failed`, `canceled`).
    Failed,
    /// It could not take the message: a JSON-RPC error, a task that wants
    /// authentication, or a state this engine does not know.
    NotUnderstood,
    /// Still at it (`submitted`, `working`).
    Working,
    /// It asks the sender something first (`input-required`).
    WantsInput,
}

impl Verdict {
    /// The verdict of a task state.
    pub fn of_state(state: &str) -> Verdict {
        match state {
            "completed" => Verdict::Done,
            "rejected" => Verdict::Refused,
            "failed" | "canceled" => Verdict::Failed,
            "submitted" | "working" => Verdict::Working,
            "input-required" => Verdict::WantsInput,
            _ => Verdict::NotUnderstood,
        }
    }

    /// The performatives that carry it, most fitting first.
    fn performatives(self) -> &'static [&'static str] {
        match self {
            Verdict::Done => &["inform", "propose", "confirm", "agree"],
            Verdict::Refused => &["refuse", "reject-proposal"],
            Verdict::Failed => &["failure"],
            Verdict::NotUnderstood => &["not-understood", "failure"],
            Verdict::Working => &["agree"],
            // A question where the thread may ask one back, else it could not go on.
            Verdict::WantsInput => &["query-ref", "not-understood", "failure"],
        }
    }
}

/// The reply an answer makes: its performative (when the thread may send one that fits)
/// and content.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The performative.
    pub performative: String,
    /// The content.
    pub content: Value,
}

/// The reply to `answer` in a thread that may send `open`; `None` when nothing fits. A
/// performative the agent names itself is taken as it is, fitting or not (the conversation
/// then judges it as any message).
pub fn reply_to(answer: &Answer, open: &[Arc<str>]) -> Option<Reply> {
    let performative = match answer.named_performative() {
        Some(named) => named,
        None => answer
            .verdict()
            .performatives()
            .iter()
            .find(|wanted| open.iter().any(|open| &**open == **wanted))?,
    };
    let content = match performative {
        // The answers that say why not carry the agent's words as their reason.
        "refuse" | "reject-proposal" | "failure" | "not-understood" => {
            json!({ "reason": answer.reason() })
        }
        "agree" if answer.verdict() == Verdict::Working => json!({}),
        // The question is the task's status message.
        "query-ref" if answer.verdict() == Verdict::WantsInput => content_of(answer.status_parts()),
        _ => content_of(answer.parts()),
    };
    Some(Reply {
        performative: performative.to_owned(),
        content,
    })
}

/// What the remote agent answered a call with.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// A task or a message.
    Result(Box<SendResult>),
    /// A JSON-RPC error.
    Error(RpcError),
}

/// An [`Answer`], looked into.
pub(super) enum Said<'a> {
    Task(&'a Task),
    Message(&'a A2aMessage),
    Error(&'a RpcError),
}

impl Answer {
    pub(super) fn said(&self) -> Said<'_> {
        match self {
            Answer::Result(result) => match &**result {
                SendResult::Task(task) => Said::Task(task),
                SendResult::Message(message) => Said::Message(message),
            },
            Answer::Error(error) => Said::Error(error),
        }
    }

    /// What it amounts to.
    pub fn verdict(&self) -> Verdict {
        match self.said() {
            Said::Task(task) => Verdict::of_state(&task.status.state),
            Said::Message(_) => Verdict::Done,
            Said::Error(_) => Verdict::NotUnderstood,
        }
    }

    /// The parts that carry its result: a task's artifacts (or else its status message), a
    /// message's own.
    fn parts(&self) -> Vec<&Part> {
        match self.said() {
            Said::Task(task) => {
                let artifacts: Vec<&Part> = task.artifacts.iter().flat_map(|a| &a.parts).collect();
                if artifacts.is_empty() {
                    task.status.message.iter().flat_map(|m| &m.parts).collect()
                } else {
                    artifacts
                }
            }
            Said::Message(message) => message.parts.iter().collect(),
            Said::Error(_) => Vec::new(),
        }
    }

    /// The parts of a task's status message (what a task that wants input asks).
    fn status_parts(&self) -> Vec<&Part> {
        match self.said() {
            Said::Task(task) => task.status.message.iter().flat_map(|m| &m.parts).collect(),
            _ => Vec::new(),
        }
    }

    /// Whether it is a task that asks for input and `reply` asks the question in the
    /// conversation: then the task waits for the initiator's answer.
    pub(super) fn asks(&self, reply: Option<&Reply>) -> bool {
        self.verdict() == Verdict::WantsInput
            && reply.is_some_and(|reply| reply.performative == "query-ref")
    }

    /// Why, for a refusal or a failure: the agent's words, or the state it named.
    fn reason(&self) -> String {
        match self.said() {
            Said::Error(error) => error.message.clone(),
            Said::Task(task) => {
                let said = texts(task.status.message.iter().flat_map(|m| &m.parts));
                if said.is_empty() {
                    format!("the A2A task ended `{}`", task.status.state)
                } else {
                    said
                }
            }
            Said::Message(message) => {
                let said = texts(&message.parts);
                if said.is_empty() {
                    "the A2A agent gave no reason".to_owned()
                } else {
                    said
                }
            }
        }
    }

    /// The performative the agent named in `metadata.colloquy.performative`, on the task,
    /// its status message, or the message.
    fn named_performative(&self) -> Option<&str> {
        fn named(metadata: Option<&Map<String, Value>>) -> Option<&str> {
            metadata?
                .get("colloquy")?
                .get("performative")?
                .as_str()
                .filter(|name| !name.is_empty())
        }
        match self.said() {
            Said::Task(task) => named(task.metadata.as_ref())
                .or_else(|| named(task.status.message.as_ref()?.metadata.as_ref())),
            Said::Message(message) => named(message.metadata.as_ref()),
            Said::Error(_) => None,
        }
    }
}

/// The text parts, joined by newlines.
pub(super) fn texts<'a>(parts: impl IntoIterator<Item = &'a Part>) -> String {
    parts
        .into_iter()
        .filter_map(|part| match part {
            Part::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A reply's content from the parts of an answer: the value of a lone data part (the
/// usual answer of an agent that returns structured results), else `{"text": …}` with the
/// text parts joined, plus `"data"` and `"files"` lists when there are such parts.
pub fn content_of(parts: Vec<&Part>) -> Value {
    if let [Part::Data { data }] = parts.as_slice() {
        return data.clone();
    }
    let mut content = Map::new();
    let text = texts(parts.iter().copied());
    if !text.is_empty() {
        content.insert("text".to_owned(), Value::String(text));
    }
    let (mut data, mut files) = (Vec::new(), Vec::new());
    for part in &parts {
        match part {
            Part::Data { data: value } => data.push(value.clone()),
            Part::File { file } => files.push(file.clone()),
            Part::Text { .. } => {}
        }
    }
    for (key, values) in [("data", data), ("files", files)] {
        if !values.is_empty() {
            content.insert(key.to_owned(), Value::Array(values));
        }
    }
    Value::Object(content)
}

/// The parts a message's content shows as in A2A, the inverse of [`content_of`]: a string
/// is one text part; an object of only `text` (a string), `data` (a list) and `files` (a
/// list of A2A file objects) is those parts, in that order; any other value is one data
/// part. So a participant answers with text (`"done"`), files
/// (`{"files": [{"name": "a.txt", "mimeType": "text/plain", "bytes": "…"}]}`) or data
/// (`{"total": 42}`), and an answer that came from A2A parts goes back as the same parts.
pub fn parts_of(content: &Value) -> Vec<Part> {
    if let Value::String(text) = content {
        return vec![Part::Text { text: text.clone() }];
    }
    let as_parts = content.as_object().filter(|fields| {
        !fields.is_empty()
            && fields.iter().all(|(key, value)| match key.as_str() {
                "text" => value.is_string(),
                "data" => value.is_array(),
                "files" => value
                    .as_array()
                    .is_some_and(|files| files.iter().all(Value::is_object)),
                _ => false,
            })
    });
    let Some(fields) = as_parts else {
        return vec![Part::Data {
            data: content.clone(),
        }];
    };
    let mut parts = Vec::new();
    if let Some(Value::String(text)) = fields.get("text") {
        parts.push(Part::Text { text: text.clone() });
    }
    for (key, wrap) in [
        ("data", (|data| Part::Data { data }) as fn(Value) -> Part),
        ("files", |file| Part::File { file }),
    ] {
        if let Some(Value::Array(values)) = fields.get(key) {
            parts.extend(values.iter().cloned().map(wrap));
        }
    }
    parts
}

/// The `message/send` request for one inbox item.
pub fn message_send(item: &InboxItem) -> Request<MessageSendParams> {
    let message = &item.message;
    let content = message.content.value();
    let part = match content {
        Value::String(text) => Part::Text { text },
        data => Part::Data { data },
    };
    let mut colloquy = Map::new();
    colloquy.insert("conversation".into(), json!(&*item.conversation_id));
    if let Some(template) = &item.template {
        colloquy.insert("template".into(), json!(&**template));
    }
    colloquy.insert("performative".into(), json!(message.performative.name()));
    colloquy.insert("sender".into(), json!(&*message.sender));
    if let Some(in_reply_to) = &message.in_reply_to {
        colloquy.insert("in_reply_to".into(), json!(&**in_reply_to));
    }
    if let Some(reply_by) = message.reply_by {
        colloquy.insert("reply_by".into(), json!(reply_by));
    }
    let mut metadata = Map::new();
    metadata.insert("colloquy".into(), Value::Object(colloquy));
    Request::new(
        format!("{}/{}", item.conversation_id, message.id),
        "message/send",
        MessageSendParams {
            message: A2aMessage {
                kind: "message".to_owned(),
                role: "user".to_owned(),
                message_id: message.id.to_string(),
                context_id: Some(item.conversation_id.to_string()),
                task_id: None,
                parts: vec![part],
                metadata: Some(metadata),
            },
            configuration: Some(SendConfiguration { blocking: true }),
        },
    )
}

/// The reply to a cancel the agent was asked to carry out, once its task has ended (or
/// the agent refused): `inform` when the task is `canceled`, `failure` with why otherwise (an
/// error, or a task that ended another way first). `None` when the thread may send neither.
pub fn cancel_reply(answer: &Answer, open: &[Arc<str>]) -> Option<Reply> {
    let canceled = matches!(answer.said(), Said::Task(task) if task.status.state == "canceled");
    let (performative, content) = if canceled {
        ("inform", json!({}))
    } else {
        let why = match answer.said() {
            Said::Task(task) => format!("the A2A task had already ended `{}`", task.status.state),
            _ => answer.reason(),
        };
        (
            "failure",
            json!({ "reason": format!("the A2A agent did not cancel its task: {why}") }),
        )
    };
    open.iter()
        .any(|open| &**open == performative)
        .then(|| Reply {
            performative: performative.to_owned(),
            content,
        })
}
