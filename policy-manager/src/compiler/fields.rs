//! Unknown fields: turning serde_ignored's paths into template paths, and finding the fields
//! that *are* allowed at a path so the diagnostic can list them.
//!
//! The allowed names come from the generated JSON Schema of the format
//! ([`colloquy_protocol::template::template_json_schema`]) rather than a hand-kept table, so
//! they cannot drift from the types.

use serde_json::Value;

/// One step of a template path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    /// A map key.
    Key(String),
    /// A sequence index.
    Index(usize),
}

/// Writes segments in the compiler's path syntax: `spec.thread.states.x.transitions[0].to`.
pub(crate) fn render_path(segments: &[Segment]) -> String {
    let mut path = String::new();
    for segment in segments {
        match segment {
            Segment::Key(key) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
            }
            Segment::Index(index) => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

/// The segments of a serde_ignored path (`Option` and newtype layers leave no trace in YAML).
pub(crate) fn segments(path: &serde_ignored::Path<'_>) -> Vec<Segment> {
    let mut segments = Vec::new();
    let mut current = path;
    loop {
        match current {
            serde_ignored::Path::Root => break,
            serde_ignored::Path::Seq { parent, index } => {
                segments.push(Segment::Index(*index));
                current = parent;
            }
            serde_ignored::Path::Map { parent, key } => {
                segments.push(Segment::Key(key.clone()));
                current = parent;
            }
            serde_ignored::Path::Some { parent }
            | serde_ignored::Path::NewtypeStruct { parent }
            | serde_ignored::Path::NewtypeVariant { parent } => current = parent,
        }
    }
    segments.reverse();
    segments
}

/// The field names the format allows in the map at `path`, sorted (the schema's own order
/// depends on whether some crate in the build enables serde_json's `preserve_order`).
pub(crate) fn allowed_fields(schema: &Value, path: &[Segment]) -> Vec<String> {
    let mut current = expand(schema, schema);
    for segment in path {
        let mut next = Vec::new();
        for candidate in &current {
            let child = match segment {
                Segment::Key(key) => candidate
                    .get("properties")
                    .and_then(|properties| properties.get(key))
                    .or_else(|| {
                        candidate
                            .get("additionalProperties")
                            .filter(|v| v.is_object())
                    }),
                Segment::Index(_) => candidate.get("items").filter(|v| v.is_object()),
            };
            if let Some(child) = child {
                next.extend(expand(schema, child));
            }
        }
        current = next;
    }
    let mut names: Vec<String> = current
        .into_iter()
        .filter_map(|candidate| candidate.get("properties").and_then(Value::as_object))
        .flat_map(|properties| properties.keys().cloned())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Deepest `$ref` chain followed; the format's schema nests far less, so this only guards
/// against a cycle.
const MAX_REF_DEPTH: usize = 32;

/// `schema` with `$ref`s resolved and `anyOf`/`oneOf`/`allOf` branches spread out.
fn expand<'s>(root: &'s Value, schema: &'s Value) -> Vec<&'s Value> {
    let mut out = Vec::new();
    let mut pending = vec![(schema, 0)];
    while let Some((schema, depth)) = pending.pop() {
        if depth > MAX_REF_DEPTH {
            continue;
        }
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str)
            && let Some(target) = reference
                .strip_prefix('#')
                .and_then(|ptr| root.pointer(ptr))
        {
            pending.push((target, depth + 1));
        }
        for combinator in ["anyOf", "oneOf", "allOf"] {
            if let Some(Value::Array(branches)) = schema.get(combinator) {
                pending.extend(branches.iter().rev().map(|branch| (branch, depth + 1)));
            }
        }
        out.push(schema);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use colloquy_protocol::template::template_json_schema;

    fn keys(path: &str) -> Vec<Segment> {
        path.split('.')
            .map(|key| Segment::Key(key.to_owned()))
            .collect()
    }

    #[test]
    fn allowed_fields_follow_refs_maps_options_and_action_variants() {
        let schema = template_json_schema();
        assert_eq!(
            allowed_fields(&schema, &[]),
            ["apiVersion", "kind", "metadata", "spec"]
        );
        assert_eq!(
            allowed_fields(&schema, &keys("spec.thread")),
            ["initial", "on_expiry", "states"]
        );
        assert_eq!(
            allowed_fields(&schema, &keys("spec.thread.states.anything")),
            [
                "description",
                "late",
                "on_deadline",
                "terminal",
                "transitions"
            ]
        );
        assert_eq!(
            allowed_fields(&schema, &keys("spec.hooks.limits")),
            ["memory_bytes", "timeout_ms"]
        );
        let mut reject = keys("spec.actions.on_message");
        reject.extend([
            Segment::Index(0),
            Segment::Key("then".into()),
            Segment::Index(1),
        ]);
        reject.push(Segment::Key("reject".into()));
        assert_eq!(allowed_fields(&schema, &reject), ["reason"]);
    }

    #[test]
    fn paths_render_in_template_syntax() {
        let path = [
            Segment::Key("spec".into()),
            Segment::Key("routing".into()),
            Segment::Index(2),
            Segment::Key("when".into()),
        ];
        assert_eq!(render_path(&path), "spec.routing[2].when");
    }
}
