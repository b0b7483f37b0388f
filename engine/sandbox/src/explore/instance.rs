//! The smallest value a JSON Schema accepts, as the explorer sends it: the schema's first
//! example, enum value, constant or default when it gives one, else a minimal instance
//! built from its type and constraints. Not a full solver: a schema it cannot satisfy
//! makes the engine refuse the message, which the explorer counts as a refused input.

use serde_json::{Map, Value, json};

/// A value `schema` should accept.
pub fn minimal_instance(schema: &Value) -> Value {
    let Value::Object(schema) = schema else {
        return json!({});
    };
    for key in ["examples", "enum"] {
        if let Some(Value::Array(values)) = schema.get(key)
            && let Some(first) = values.first()
        {
            return first.clone();
        }
    }
    for key in ["const", "default"] {
        if let Some(value) = schema.get(key) {
            return value.clone();
        }
    }
    let kind = match schema.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|kind| *kind != "null")
            .unwrap_or("null"),
        _ => "object",
    };
    match kind {
        "object" => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let mut object = Map::new();
            for name in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let value = properties
                    .and_then(|properties| properties.get(name))
                    .map_or_else(|| json!("x"), minimal_instance);
                object.insert(name.to_owned(), value);
            }
            Value::Object(object)
        }
        "string" => {
            let length = schema
                .get("minLength")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .max(1);
            Value::String("x".repeat(usize::try_from(length).unwrap_or(1)))
        }
        "integer" | "number" => {
            let minimum = schema.get("minimum").and_then(Value::as_f64);
            let exclusive = schema
                .get("exclusiveMinimum")
                .and_then(Value::as_f64)
                .map(|bound| bound + 1.0);
            let least = minimum.into_iter().chain(exclusive).fold(0.0_f64, f64::max);
            json!(least.ceil() as i64)
        }
        "boolean" => json!(false),
        "array" => {
            let count = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = schema
                .get("items")
                .map_or_else(|| json!({}), minimal_instance);
            Value::Array(vec![item; usize::try_from(count).unwrap_or(0)])
        }
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_properties_get_their_smallest_values() {
        let schema = json!({
            "type": "object",
            "required": ["amount", "purpose", "source"],
            "properties": {
                "amount": { "type": "number", "minimum": 5 },
                "purpose": { "type": "string", "minLength": 3 },
                "source": { "enum": ["salary", "business"] },
                "note": { "type": "string" }
            }
        });
        assert_eq!(
            minimal_instance(&schema),
            json!({ "amount": 5, "purpose": "xxx", "source": "salary" })
        );
    }

    #[test]
    fn an_example_wins() {
        let schema = json!({ "type": "object", "examples": [{ "price": 12 }] });
        assert_eq!(minimal_instance(&schema), json!({ "price": 12 }));
    }
}
