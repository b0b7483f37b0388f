//! A pre-check of what a template's YAML expands to once its aliases are replayed, before
//! serde builds anything.
//!
//! An alias (`*big`) makes the deserializer replay the whole node its anchor (`&big`) names,
//! so a small file can describe a huge tree: 133 KB holding a list of 10,000 strings
//! referenced 500 times is five million strings, and building them took 1.7 GB. serde_norway
//! refuses the classic billion laughs (aliases of aliases) by counting alias jumps, but not a
//! few hundred aliases of one large node. So this pass walks the events once with
//! yaml-rust2, without expanding anything: it remembers what each anchored node holds (nodes,
//! scalar bytes, depth; aliases inside it counted at their expanded size) and adds that at
//! every alias. Linear in the text; refuses at the first alias or node that passes a limit,
//! with its position.
//!
//! A YAML syntax error ends the pass quietly: serde reports it with its own position.

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::Marker;

/// Most nodes (scalars, lists, maps) a template may hold after alias expansion. The
/// built-in templates hold a few hundred; a template of 200,000 nodes is a mistake, not a
/// policy, and at the few hundred bytes a built node costs it stays within tens of MB.
pub const MAX_EXPANDED_NODES: u64 = 200_000;

/// Most scalar text, in bytes, a template may hold after alias expansion: four times the
/// largest upload (1 MiB), so an alias-free template never reaches it.
pub const MAX_EXPANDED_SCALAR_BYTES: u64 = 4 * 1024 * 1024;

/// Deepest nesting of lists and maps after alias expansion. Templates need about ten levels
/// (JSON Schemas of nested objects a few more); serde_norway itself stops at 128 with a
/// message that does not say which limit, so this one, lower, speaks first.
pub const MAX_EXPANDED_DEPTH: usize = 64;

/// Which limit a template passed, and where.
#[derive(Debug, PartialEq, Eq)]
pub struct TooLarge {
    /// What passed its limit, as a sentence naming the limit.
    pub message: String,
    /// 1-based line of the alias or node at which it did.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

/// What one node expands to.
#[derive(Clone, Copy, Default)]
struct Size {
    nodes: u64,
    scalar_bytes: u64,
    /// Levels of lists and maps in it (0 for a scalar).
    depth: usize,
}

impl Size {
    fn add(&mut self, other: Size) {
        self.nodes += other.nodes;
        self.scalar_bytes += other.scalar_bytes;
        self.depth = self.depth.max(other.depth);
    }
}

/// An open list or map: its anchor (0 for none) and what it holds so far.
struct Open {
    anchor: usize,
    size: Size,
}

/// `None` when the first document of `source` stays within [`MAX_EXPANDED_NODES`],
/// [`MAX_EXPANDED_SCALAR_BYTES`] and [`MAX_EXPANDED_DEPTH`] with every alias expanded.
pub fn too_large(source: &str) -> Option<TooLarge> {
    let mut parser = Parser::new_from_str(source);
    // Anchor ids are handed out from 1 in document order.
    let mut anchors: Vec<Size> = Vec::new();
    let mut stack: Vec<Open> = Vec::new();
    let mut total = Size::default();
    let mut seen_document = false;
    while let Ok((event, marker)) = parser.next_token() {
        let (node, anchor) = match event {
            Event::StreamEnd | Event::DocumentEnd => break,
            Event::DocumentStart if seen_document => break,
            Event::DocumentStart => {
                seen_document = true;
                continue;
            }
            Event::Scalar(value, _, anchor, _) => (
                Size {
                    nodes: 1,
                    scalar_bytes: value.len() as u64,
                    depth: 0,
                },
                anchor,
            ),
            Event::Alias(anchor) => match anchor.checked_sub(1).and_then(|i| anchors.get(i)) {
                Some(size) => (*size, 0),
                // An unknown anchor: serde refuses it.
                None => continue,
            },
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                total.nodes += 1;
                if let Some(found) = check(&total, stack.len() + 1, marker) {
                    return Some(found);
                }
                stack.push(Open {
                    anchor,
                    size: Size {
                        nodes: 1,
                        scalar_bytes: 0,
                        depth: 0,
                    },
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(open) = stack.pop() else { break };
                let mut size = open.size;
                size.depth += 1;
                remember(&mut anchors, open.anchor, size);
                if let Some(parent) = stack.last_mut() {
                    parent.size.add(size);
                }
                continue;
            }
            Event::StreamStart | Event::Nothing => continue,
        };
        // A scalar or an alias: a whole node at once.
        total.nodes += node.nodes;
        total.scalar_bytes += node.scalar_bytes;
        if let Some(found) = check(&total, stack.len() + node.depth, marker) {
            return Some(found);
        }
        remember(&mut anchors, anchor, node);
        if let Some(parent) = stack.last_mut() {
            parent.size.add(node);
        }
    }
    None
}

fn remember(anchors: &mut Vec<Size>, anchor: usize, size: Size) {
    if anchor == 0 {
        return;
    }
    if anchors.len() < anchor {
        anchors.resize(anchor, Size::default());
    }
    anchors[anchor - 1] = size;
}

fn check(total: &Size, depth: usize, marker: Marker) -> Option<TooLarge> {
    let message = if total.nodes > MAX_EXPANDED_NODES {
        format!(
            "the template expands to more than {MAX_EXPANDED_NODES} nodes (the limit) once its \
             aliases are replayed"
        )
    } else if total.scalar_bytes > MAX_EXPANDED_SCALAR_BYTES {
        format!(
            "the template expands to more than {MAX_EXPANDED_SCALAR_BYTES} bytes of text (the \
             limit) once its aliases are replayed"
        )
    } else if depth > MAX_EXPANDED_DEPTH {
        format!(
            "lists and maps nest more than {MAX_EXPANDED_DEPTH} deep (the limit) once aliases \
             are replayed"
        )
    } else {
        return None;
    };
    Some(TooLarge {
        message,
        // yaml-rust2 counts lines from 1 and columns from 0.
        line: marker.line(),
        column: marker.col() + 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The template body: a list of `items` strings anchored once and referenced
    /// `uses` times.
    fn amplified(items: usize, uses: usize) -> String {
        let list: Vec<String> = (0..items).map(|i| format!("s{i:05}")).collect();
        let aliases = vec!["*big"; uses].join(", ");
        format!(
            "a: 1\nbig: &big [{}]\nexamples: [{aliases}]\n",
            list.join(", ")
        )
    }

    #[test]
    fn an_anchored_list_replayed_hundreds_of_times_is_refused_at_the_alias() {
        let bomb = amplified(10_000, 500);
        assert!(bomb.len() < 140_000, "the issue's size: {}", bomb.len());
        let found = too_large(&bomb).expect("refused");
        assert!(found.message.contains("200000 nodes"), "{}", found.message);
        assert_eq!(found.line, 3);
        // The 19th alias passes the limit: 10,007 nodes before the first, 10,001 per alias.
        assert_eq!(found.column, 12 + 18 * 6);
        // The same anchors used a few times are fine.
        assert_eq!(too_large(&amplified(1_000, 5)), None);
    }

    #[test]
    fn aliases_of_aliases_count_at_their_expanded_size() {
        let mut laughs = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..=9 {
            let previous = (b'a' + level - 1) as char;
            let name = (b'a' + level) as char;
            let refs = vec![format!("*{previous}"); 10].join(", ");
            laughs.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        let found = too_large(&laughs).expect("refused");
        assert!(found.message.contains("nodes"), "{}", found.message);
        assert!(found.line >= 5, "refused where it passes: {found:?}");
    }

    #[test]
    fn long_text_replayed_passes_the_byte_limit() {
        let text = "x".repeat(100_000);
        let uses = vec!["*t"; 50].join(", ");
        let found = too_large(&format!("t: &t {text}\nu: [{uses}]\n")).expect("refused");
        assert!(found.message.contains("bytes of text"), "{}", found.message);
    }

    #[test]
    fn depth_counts_the_replayed_node() {
        let deep = format!(
            "d: &d {}1{}\n",
            "[".repeat(MAX_EXPANDED_DEPTH - 2),
            "]".repeat(MAX_EXPANDED_DEPTH - 2)
        );
        // As written, within the limit; one alias three levels down passes it.
        assert_eq!(too_large(&deep), None);
        let found = too_large(&format!("{deep}e: [[[*d]]]\n")).expect("refused");
        assert!(
            found.message.contains("nest more than"),
            "{}",
            found.message
        );
        assert_eq!((found.line, found.column), (2, 7));
    }

    #[test]
    fn the_built_in_templates_pass() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates");
        for entry in std::fs::read_dir(dir).expect("templates") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|ext| ext == "yaml") {
                let text = std::fs::read_to_string(&path).expect("read");
                assert_eq!(too_large(&text), None, "{}", path.display());
            }
        }
    }
}
