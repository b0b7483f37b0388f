//! Comparing what a test expects with what happened: maps partially (only the keys
//! written), lists element by element with exactly the length written, everything else
//! equal. Each difference is a path into the expectation and both sides.

use serde_json::Value;

/// One way the outcome differs from the expectation.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Difference {
    /// Where, e.g. `threads.bob` or `commitments[0].state`.
    pub path: String,
    /// What the test wrote.
    pub expected: Value,
    /// What happened (`null` when missing).
    pub got: Value,
    /// What else to say (a list's length, a missing key).
    pub note: Option<String>,
}

/// Compares `got` with `expected` under `path`, adding each difference to `out`.
pub fn compare(path: &str, expected: &Value, got: &Value, out: &mut Vec<Difference>) {
    match (expected, got) {
        (Value::Object(expected), Value::Object(got_map)) => {
            for (key, expected) in expected {
                let path = join(path, key);
                match got_map.get(key) {
                    Some(got) => compare(&path, expected, got, out),
                    None if expected.is_null() => {}
                    None => out.push(Difference {
                        path,
                        expected: expected.clone(),
                        got: Value::Null,
                        note: Some("missing".into()),
                    }),
                }
            }
        }
        (Value::Array(expected_list), Value::Array(got_list)) => {
            if expected_list.len() != got_list.len() {
                out.push(Difference {
                    path: path.to_owned(),
                    expected: Value::Array(expected_list.clone()),
                    got: Value::Array(got_list.clone()),
                    note: Some(format!(
                        "expected {} item{}, got {}",
                        expected_list.len(),
                        plural(expected_list.len()),
                        got_list.len()
                    )),
                });
                return;
            }
            for (index, (expected, got)) in expected_list.iter().zip(got_list).enumerate() {
                compare(&format!("{path}[{index}]"), expected, got, out);
            }
        }
        (Value::Number(expected_number), Value::Number(got_number))
            if expected_number.as_f64() == got_number.as_f64() => {}
        _ if expected == got => {}
        _ => out.push(Difference {
            path: path.to_owned(),
            expected: expected.clone(),
            got: got.clone(),
            note: None,
        }),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn differences(expected: Value, got: Value) -> Vec<String> {
        let mut out = Vec::new();
        compare("", &expected, &got, &mut out);
        out.into_iter()
            .map(|d| format!("{}: {} / {} {:?}", d.path, d.expected, d.got, d.note))
            .collect()
    }

    #[test]
    fn maps_compare_only_the_keys_written() {
        let got =
            json!({ "status": "completed", "outcome": "success", "vars": { "a": 1, "b": 2 } });
        assert!(differences(json!({ "vars": { "a": 1 } }), got.clone()).is_empty());
        assert_eq!(
            differences(json!({ "vars": { "a": 2 }, "outcome": "failure" }), got),
            [
                "outcome: \"failure\" / \"success\" None",
                "vars.a: 2 / 1 None",
            ]
        );
    }

    #[test]
    fn lists_need_their_exact_length_and_compare_items_partially() {
        let got = json!([{ "kind": "out_of_protocol", "agent": "bob", "at": 5 }]);
        assert!(differences(json!([{ "agent": "bob" }]), got.clone()).is_empty());
        assert_eq!(differences(json!([]), got.clone()).len(), 1);
        assert_eq!(
            differences(json!([{ "agent": "carol" }]), got),
            ["[0].agent: \"carol\" / \"bob\" None"]
        );
    }

    #[test]
    fn a_missing_key_differs_unless_null_is_expected() {
        assert!(differences(json!({ "outcome": null }), json!({})).is_empty());
        assert_eq!(
            differences(json!({ "outcome": "success" }), json!({})),
            ["outcome: \"success\" / null Some(\"missing\")"]
        );
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(differences(json!(1.0), json!(1)).is_empty());
        assert_eq!(differences(json!(2), json!(1)).len(), 1);
    }
}
