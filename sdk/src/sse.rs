//! A minimal server-sent events reader: enough of the WHATWG event-stream format for what a
//! Colloquy server sends (`id`, `event`, `data` lines, comments as keep-alives).

use bytes::{Buf, BytesMut};

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// Turns chunks of bytes into events.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buffer: BytesMut,
    current: SseEvent,
    has_data: bool,
}

impl SseParser {
    /// Adds a chunk; returns the events it completed, in order.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buffer.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
            let mut line = self.buffer.split_to(end);
            self.buffer.advance(1);
            if line.last() == Some(&b'\r') {
                line.truncate(line.len() - 1);
            }
            let line = String::from_utf8_lossy(&line);
            if line.is_empty() {
                if self.has_data {
                    events.push(std::mem::take(&mut self.current));
                } else {
                    self.current = SseEvent::default();
                }
                self.has_data = false;
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (&*line, ""),
            };
            match field {
                "id" => self.current.id = Some(value.to_owned()),
                "event" => self.current.event = Some(value.to_owned()),
                "data" => {
                    if self.has_data {
                        self.current.data.push('\n');
                    }
                    self.current.data.push_str(value);
                    self.has_data = true;
                }
                _ => {}
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_are_reassembled() {
        let mut parser = SseParser::default();
        assert!(
            parser
                .push(b": keep-alive\n\nid: 4\nevent: mess")
                .is_empty()
        );
        let events = parser.push(b"age\ndata: {\"a\":\ndata: 1}\r\n\nid: 5\ndata:x\n\n");
        assert_eq!(
            events,
            vec![
                SseEvent {
                    id: Some("4".into()),
                    event: Some("message".into()),
                    data: "{\"a\":\n1}".into()
                },
                SseEvent {
                    id: Some("5".into()),
                    event: None,
                    data: "x".into()
                },
            ]
        );
    }
}
