"""The server-sent events reader: events split anywhere across chunks come out whole."""

from colloquy.sse import SseEvent, SseParser


def test_events_split_across_chunks_are_reassembled():
    parser = SseParser()
    assert parser.push(b": keep-alive\n\nid: 4\nevent: mess") == []
    events = parser.push(b'age\ndata: {"a":\ndata: 1}\r\n\nid: 5\ndata:x\n\n')
    assert events == [
        SseEvent(id="4", event="message", data='{"a":\n1}'),
        SseEvent(id="5", event=None, data="x"),
    ]


def test_an_event_without_data_is_not_dispatched():
    parser = SseParser()
    assert parser.push(b"id: 7\nevent: message\n\n") == []
    assert parser.push("data: é\n\n".encode()) == [SseEvent(id=None, event=None, data="é")]
