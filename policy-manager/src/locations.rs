//! Where things are in a template's YAML (or any YAML document, such as a template test
//! file): an index from paths such as `spec.thread.states.called.transitions[0].to` to
//! 1-based line and column.
//!
//! serde tells us *what* is wrong but, once a document has deserialized, no longer *where*
//! anything is; the semantic checks of the [`crate::compiler`] only know paths. So the
//! compiler walks the YAML once with yaml-rust2's marked event parser and records the position
//! of every map key and sequence item, then looks each diagnostic's path up here. A path
//! without an entry of its own (say, a defaulted field that is not written) falls back to its
//! nearest ancestor that has one.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::Marker;

/// A position in the YAML source, both 1-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1 (in characters).
    pub column: usize,
}

impl Location {
    fn from_marker(marker: Marker) -> Location {
        // yaml-rust2 counts lines from 1 and columns from 0.
        Location {
            line: marker.line(),
            column: marker.col() + 1,
        }
    }
}

/// The index: template path → position of its map key (or sequence item).
#[derive(Debug, Default)]
pub struct Locations {
    positions: HashMap<String, Location>,
    duplicates: Vec<DuplicateKey>,
    /// Set while a duplicate key's scalar is being consumed: the name its value is indexed
    /// under instead, so the repeated subtree does not collide with the first one.
    renamed_key: Option<String>,
}

/// A map key written twice in one mapping. serde refuses duplicate *struct* fields but lets
/// the last entry of a map (`states`, `messages`, a schema) silently win, so the compiler
/// reports these itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DuplicateKey {
    /// The path the key introduces.
    pub(crate) path: String,
    /// Where it is written again.
    pub(crate) at: Location,
    /// Where it was first written.
    pub(crate) first: Location,
}

/// Where the walker is inside one open collection.
enum Frame {
    /// A mapping at `path`; `key` is `Some` once the key of the current entry has been read and
    /// its value is awaited. `locate_at_first_key` holds the mapping's own path while it still
    /// needs a position: a block mapping's start event is marked at its first `:`, so a mapping
    /// that is a sequence item is placed at its first key instead.
    Map {
        path: String,
        key: Option<String>,
        locate_at_first_key: Option<String>,
    },
    /// A sequence at `path`; `next` is the index of the next item.
    Seq { path: String, next: usize },
}

/// Key used for a map key that is not a plain scalar (complex keys do not occur in templates,
/// but the walk must stay in step when they do).
const COMPLEX_KEY: &str = "?";

impl Locations {
    /// Indexes the first document of `source`. Never fails: on a syntax error the index keeps
    /// what was read before it (serde reports the error itself).
    pub fn index(source: &str) -> Locations {
        let mut locations = Locations::default();
        let mut parser = Parser::new_from_str(source);
        let mut stack: Vec<Frame> = Vec::new();
        let mut seen_document = false;
        while let Ok((event, marker)) = parser.next_token() {
            match event {
                Event::StreamEnd => break,
                Event::DocumentStart if seen_document => break,
                Event::DocumentStart => seen_document = true,
                Event::DocumentEnd => break,
                Event::Scalar(value, ..) => {
                    if let Some(path) = locations.node_start(&mut stack, marker, Some(&value)) {
                        locations.record(path, marker);
                    }
                    let key = locations.renamed_key.take().unwrap_or(value);
                    Locations::node_end(&mut stack, Some(key));
                }
                Event::Alias(_) => {
                    if let Some(path) = locations.node_start(&mut stack, marker, None) {
                        locations.record(path, marker);
                    }
                    Locations::node_end(&mut stack, None);
                }
                Event::MappingStart(..) | Event::SequenceStart(..) => {
                    let is_map = matches!(event, Event::MappingStart(..));
                    let in_seq = matches!(stack.last(), Some(Frame::Seq { .. }));
                    let path = locations.node_start(&mut stack, marker, None);
                    let mut locate_at_first_key = None;
                    let path = match path {
                        Some(path) if is_map && in_seq => {
                            locate_at_first_key = Some(path.clone());
                            path
                        }
                        Some(path) => {
                            locations.record(path.clone(), marker);
                            path
                        }
                        // A collection used as a map key: give it a path that cannot clash.
                        None => COMPLEX_KEY.to_owned(),
                    };
                    stack.push(if is_map {
                        Frame::Map {
                            path,
                            key: None,
                            locate_at_first_key,
                        }
                    } else {
                        Frame::Seq { path, next: 0 }
                    });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                    Locations::node_end(&mut stack, None);
                }
                Event::StreamStart | Event::Nothing => {}
            }
        }
        locations
    }

    /// A node begins. Returns the node's path when it is a value (not a map key); records a
    /// scalar map key under the path of the value it introduces.
    fn node_start(
        &mut self,
        stack: &mut [Frame],
        marker: Marker,
        scalar: Option<&str>,
    ) -> Option<String> {
        match stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Seq { path, next }) => Some(format!("{path}[{next}]")),
            Some(Frame::Map {
                path,
                key: Some(key),
                ..
            }) => Some(join(path, key)),
            Some(Frame::Map {
                path,
                key: None,
                locate_at_first_key,
            }) => {
                if let Some(own_path) = locate_at_first_key.take() {
                    self.record(own_path, marker);
                }
                if let Some(key) = scalar {
                    let value_path = join(path, key);
                    if let Some(first) = self.positions.get(&value_path) {
                        self.duplicates.push(DuplicateKey {
                            path: value_path,
                            at: Location::from_marker(marker),
                            first: *first,
                        });
                        // NUL never occurs in a path the compiler looks up.
                        self.renamed_key = Some(format!("{key}\u{0}{}", self.duplicates.len()));
                    } else {
                        self.record(value_path, marker);
                    }
                }
                None
            }
        }
    }

    /// A node ended (a scalar, an alias or a whole collection): advance the parent.
    fn node_end(stack: &mut [Frame], scalar: Option<String>) {
        match stack.last_mut() {
            None => {}
            Some(Frame::Seq { next, .. }) => *next += 1,
            Some(Frame::Map { key, .. }) => {
                *key = match key.take() {
                    Some(_) => None,
                    None => Some(scalar.unwrap_or_else(|| COMPLEX_KEY.to_owned())),
                };
            }
        }
    }

    /// Keeps the first position seen for a path (a repeated key is collected in `duplicates`).
    fn record(&mut self, path: String, marker: Marker) {
        // The root is no useful place to point at; leave it unknown.
        if path.is_empty() {
            return;
        }
        self.positions
            .entry(path)
            .or_insert_with(|| Location::from_marker(marker));
    }

    /// Keys written twice in the same mapping, in document order.
    pub(crate) fn duplicates(&self) -> &[DuplicateKey] {
        &self.duplicates
    }

    /// The position recorded for exactly this path.
    #[cfg(test)]
    pub(crate) fn get(&self, path: &str) -> Option<Location> {
        self.positions.get(path).copied()
    }

    /// The position of `path`, or of its nearest ancestor that has one.
    pub fn nearest(&self, path: &str) -> Option<Location> {
        let mut path = path;
        loop {
            if let Some(location) = self.positions.get(path) {
                return Some(*location);
            }
            if path.is_empty() {
                return None;
            }
            path = parent(path);
        }
    }
}

/// `parent.key`, or just `key` at the root.
fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

/// The path one step up: `a.b[2]` → `a.b`, `a.b` → `a`, `a` → ``.
fn parent(path: &str) -> &str {
    let cut = match path.as_bytes().last() {
        Some(b']') => path.rfind('['),
        _ => path.rfind(['.', '[']),
    };
    cut.map_or("", |cut| &path[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "\
apiVersion: colloquy.dev/v1
spec:
  thread:
    states:
      called:
        transitions:
          - performative: agree
            to: agreed
          - { performative: refuse, to: refused }
  list: [a, {b: 1}]
";

    fn at(line: usize, column: usize) -> Option<Location> {
        Some(Location { line, column })
    }

    #[test]
    fn map_keys_and_sequence_items_are_located() {
        let locations = Locations::index(SOURCE);
        assert_eq!(locations.get("apiVersion"), at(1, 1));
        assert_eq!(locations.get("spec"), at(2, 1));
        assert_eq!(locations.get("spec.thread.states.called"), at(5, 7));
        assert_eq!(
            locations.get("spec.thread.states.called.transitions[0]"),
            at(7, 13)
        );
        assert_eq!(
            locations.get("spec.thread.states.called.transitions[0].to"),
            at(8, 13)
        );
        assert_eq!(
            locations.get("spec.thread.states.called.transitions[1].to"),
            at(9, 37)
        );
        assert_eq!(locations.get("spec.list[1].b"), at(10, 14));
        assert_eq!(locations.get("spec.list[2]"), None);
    }

    #[test]
    fn unknown_paths_fall_back_to_the_nearest_ancestor() {
        let locations = Locations::index(SOURCE);
        assert_eq!(
            locations.nearest("spec.thread.states.called.on_deadline"),
            at(5, 7)
        );
        assert_eq!(
            locations.nearest("spec.thread.states.called.transitions[0].when"),
            at(7, 13)
        );
        assert_eq!(locations.nearest("nowhere.at.all"), None);
    }

    #[test]
    fn keys_written_twice_in_one_mapping_are_collected() {
        let locations = Locations::index("a:\n  x: {k: 1}\n  y: 2\n  x: {k: 3}\nb: {x: 1}\n");
        assert_eq!(
            locations.duplicates(),
            [DuplicateKey {
                path: "a.x".to_owned(),
                at: Location { line: 4, column: 3 },
                first: Location { line: 2, column: 3 },
            }]
        );
        assert_eq!(
            locations.get("a.x.k"),
            Some(Location { line: 2, column: 7 })
        );
    }

    #[test]
    fn a_syntax_error_keeps_what_came_before() {
        let locations = Locations::index("a: 1\nb: [1,\nc: 2\n");
        assert_eq!(locations.get("a"), at(1, 1));
        assert_eq!(locations.get("b"), at(2, 1));
    }

    #[test]
    fn parent_paths() {
        assert_eq!(parent("a.b[2]"), "a.b");
        assert_eq!(parent("a.b[2].c"), "a.b[2]");
        assert_eq!(parent("a"), "");
        assert_eq!(parent(""), "");
    }
}
