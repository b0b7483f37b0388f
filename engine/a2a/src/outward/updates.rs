//! A task followed as it goes: the server-sent events of v1.0's `SendStreamingMessage`.
//!
//! Each event's `data` is a JSON-RPC response whose result is one `StreamResponse`: the
//! whole task (`{"task"}`), a direct answer (`{"message"}`), a new state
//! (`{"statusUpdate"}`) or a new artifact (`{"artifactUpdate"}`). [`Updates`] keeps the
//! task as the events make it, and yields it after each event as an [`Answer`], read by the
//! same rules as a call's.

use colloquy_protocol::a2a::{Part, RpcError, SendResult, Task};
use serde_json::Value;

use super::dialect::{answer_from_v1, artifact_from_v1, status_from_v1};
use super::{Answer, CallError, MAX_ANSWER_BYTES};

/// The events of one stream, and the task they have made so far.
pub struct Updates {
    response: reqwest::Response,
    events: Events,
    task: TaskSoFar,
}

impl Updates {
    /// The events of `response` (a `text/event-stream`).
    pub fn new(response: reqwest::Response) -> Updates {
        Updates {
            response,
            events: Events::default(),
            task: TaskSoFar::default(),
        }
    }

    /// What the agent has answered after the next event: the task as it now stands, a
    /// message, or an error. `None` when the stream ended; `Err` when it broke or sent what
    /// is no A2A event.
    pub async fn next(&mut self) -> Result<Option<Answer>, CallError> {
        loop {
            let Some(data) = self.next_event().await? else {
                return Ok(None);
            };
            if let Some(answer) = self.task.apply(&data).map_err(|why| {
                CallError::Broken(format!("SendStreamingMessage sent no A2A event: {why}"))
            })? {
                return Ok(Some(answer));
            }
        }
    }

    /// The `data` of the next event; `None` when the stream ended.
    async fn next_event(&mut self) -> Result<Option<String>, CallError> {
        loop {
            if let Some(data) = self.events.next_data() {
                return Ok(Some(data));
            }
            if self.events.len() > MAX_ANSWER_BYTES {
                return Err(CallError::Broken(format!(
                    "an event over {MAX_ANSWER_BYTES} bytes"
                )));
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.events.push(&chunk),
                Ok(None) => return Ok(None),
                Err(error) => return Err(CallError::Unreachable(error.to_string())),
            }
        }
    }
}

/// Server-sent events from the bytes of a stream: each event's `data` lines.
#[derive(Default)]
struct Events {
    /// Bytes received and not yet split into lines.
    pending: Vec<u8>,
    /// The `data` lines of the event being read, joined by newlines.
    data: String,
}

impl Events {
    fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// Bytes held, of an event not yet complete.
    fn len(&self) -> usize {
        self.pending.len() + self.data.len()
    }

    /// The `data` of the next complete event, if one is in.
    fn next_data(&mut self) -> Option<String> {
        while let Some(end) = self.pending.iter().position(|byte| *byte == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    return Some(std::mem::take(&mut self.data));
                }
            } else if let Some(data) = line.strip_prefix("data:") {
                if !self.data.is_empty() {
                    self.data.push('\n');
                }
                self.data.push_str(data.strip_prefix(' ').unwrap_or(data));
            }
            // Other fields (`event`, `id`, `retry`) and comments say nothing here.
        }
        None
    }
}

/// The task as a stream's events make it.
#[derive(Default)]
struct TaskSoFar {
    task: Option<Task>,
}

impl TaskSoFar {
    /// Applies one event's data (a JSON-RPC response); the answer it makes, if any (a new
    /// artifact alone makes none: the state is what answers).
    fn apply(&mut self, data: &str) -> Result<Option<Answer>, String> {
        let mut response: Value = serde_json::from_str(data).map_err(|error| error.to_string())?;
        if let Some(error) = response.get_mut("error") {
            let error: RpcError =
                serde_json::from_value(error.take()).map_err(|error| error.to_string())?;
            return Ok(Some(Answer::Error(error)));
        }
        let Some(mut result) = response.get_mut("result").map(Value::take) else {
            return Err("a response with neither result nor error".to_owned());
        };
        if let Some(mut update) = result.get_mut("statusUpdate").map(Value::take) {
            let status = status_from_v1(update["status"].take())?;
            match self.task.as_mut() {
                Some(task) => task.status = status,
                None => {
                    let field = |name: &str| update[name].as_str().map(str::to_owned);
                    self.task = Some(Task {
                        kind: "task".to_owned(),
                        id: field("taskId").unwrap_or_default(),
                        context_id: field("contextId"),
                        status,
                        artifacts: Vec::new(),
                        metadata: None,
                    });
                }
            }
        } else if let Some(mut update) = result.get_mut("artifactUpdate").map(Value::take) {
            let append = update["append"].as_bool().unwrap_or(false);
            let artifact = artifact_from_v1(update["artifact"].take())?;
            let Some(task) = self.task.as_mut() else {
                return Err("an artifact update before the task".to_owned());
            };
            let same = task.artifacts.iter_mut().find(|kept| {
                kept.artifact_id.is_some() && kept.artifact_id == artifact.artifact_id
            });
            match same {
                Some(kept) if append => append_parts(&mut kept.parts, artifact.parts),
                Some(kept) => *kept = artifact,
                None => task.artifacts.push(artifact),
            }
            return Ok(None);
        } else {
            match answer_from_v1(result)? {
                SendResult::Task(task) => self.task = Some(task),
                message @ SendResult::Message(_) => {
                    return Ok(Some(Answer::Result(Box::new(message))));
                }
            }
        }
        Ok(self
            .task
            .clone()
            .map(|task| Answer::Result(Box::new(SendResult::Task(task)))))
    }
}

/// Appends a chunk's parts to an artifact's: text that goes on from text is one text (a
/// streamed answer arrives in pieces of a sentence, not in lines); other parts are added.
fn append_parts(kept: &mut Vec<Part>, chunk: Vec<Part>) {
    let mut chunk = chunk.into_iter();
    if let (Some(Part::Text { text: last }), Some(Part::Text { text: first })) =
        (kept.last_mut(), chunk.as_slice().first())
    {
        last.push_str(first);
        chunk.next();
    }
    kept.extend(chunk);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_are_their_data_lines_split_anywhere() {
        let mut events = Events::default();
        events.push(b"data: {\"a\":\n\ndata: 1}\r\n: a comment\nevent: x\n");
        assert_eq!(events.next_data().as_deref(), Some("{\"a\":"));
        assert_eq!(events.next_data(), None, "the second event is not complete");
        events.push(b"data:2\n\n");
        assert_eq!(events.next_data().as_deref(), Some("1}\n2"));
        assert_eq!(events.len(), 0);
    }

    fn event(result: Value) -> String {
        json!({"jsonrpc": "2.0", "id": 1, "result": result}).to_string()
    }

    fn state(answer: Option<Answer>) -> String {
        match answer {
            Some(Answer::Result(result)) => match *result {
                SendResult::Task(task) => task.status.state,
                SendResult::Message(_) => "a message".to_owned(),
            },
            other => format!("{other:?}"),
        }
    }

    /// The task, then its updates: each new state answers with the task as it stands,
    /// artifacts (appended to by id) included; a new artifact alone answers nothing.
    #[test]
    fn updates_make_the_task_as_it_goes() {
        let mut task = TaskSoFar::default();
        let first = task.apply(&event(json!({"task": {"id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_SUBMITTED"}}})));
        assert_eq!(state(first.expect("the task")), "submitted");
        let working = task.apply(&event(json!({"statusUpdate": {"taskId": "t",
            "status": {"state": "TASK_STATE_WORKING"}}})));
        assert_eq!(state(working.expect("a state")), "working");
        for (text, append) in [("one", false), ("two", true)] {
            let artifact = task.apply(&event(json!({"artifactUpdate": {"taskId": "t",
                "artifact": {"artifactId": "a", "parts": [{"text": text}]}, "append": append}})));
            assert!(matches!(artifact, Ok(None)), "{artifact:?}");
        }
        let done = task
            .apply(&event(json!({"statusUpdate": {"taskId": "t",
                "status": {"state": "TASK_STATE_COMPLETED"}}})))
            .expect("the end")
            .expect("an answer");
        let Answer::Result(result) = done else {
            panic!("{done:?}")
        };
        let SendResult::Task(done) = *result else {
            panic!("not a task")
        };
        assert_eq!(done.status.state, "completed");
        assert_eq!(
            done.artifacts[0].parts,
            [Part::Text {
                text: "onetwo".into()
            }],
            "appended text goes on from the text before"
        );
        let mut parts = vec![Part::Text { text: "a".into() }];
        append_parts(&mut parts, vec![Part::Data { data: json!(1) }]);
        assert_eq!(parts.len(), 2, "other parts are added: {parts:?}");
        let error = TaskSoFar::default()
            .apply(r#"{"jsonrpc": "2.0", "id": 1, "error": {"code": -32004, "message": "no"}}"#);
        assert!(matches!(error, Ok(Some(Answer::Error(e))) if e.code == -32004));
        assert!(TaskSoFar::default().apply("not json").is_err());
        let early = TaskSoFar::default().apply(&event(
            json!({"artifactUpdate": {"artifact": {"parts": [{"text": "x"}]}}}),
        ));
        assert!(early.is_err(), "an artifact before the task");
    }
}
