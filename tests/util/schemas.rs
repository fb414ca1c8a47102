//! The JSON Schemas that docs/cli.md documents for the commands' output, and a check of a
//! document against one: the part of JSON Schema the page uses, no more.

use std::collections::HashMap;

use serde_json::Value;

/// The schemas of docs/cli.md, by `$id`: the page is read when the tests are built, so a change
/// to it is tested at once.
pub struct Schemas(HashMap<String, Value>);

impl Schemas {
    pub fn of_the_docs() -> Self {
        let page = include_str!("../../docs/cli.md");
        let schemas = page
            .split("```json\n")
            .skip(1)
            .map(|block| {
                let text = block.split("```").next().unwrap_or_default();
                let schema: Value = serde_json::from_str(text)
                    .unwrap_or_else(|error| panic!("a schema of docs/cli.md is not JSON: {error}"));
                let id = schema["$id"]
                    .as_str()
                    .expect("every schema has an $id")
                    .to_owned();
                (id, schema)
            })
            .collect();
        Self(schemas)
    }

    fn schema(&self, id: &str) -> &Value {
        self.0
            .get(id)
            .unwrap_or_else(|| panic!("docs/cli.md has no schema {id}"))
    }

    /// Asserts that `value` matches the schema `id`, listing every mismatch.
    #[track_caller]
    pub fn assert_matches(&self, id: &str, value: &Value) {
        let mut problems = Vec::new();
        self.check(self.schema(id), value, "$", &mut problems);
        assert!(
            problems.is_empty(),
            "the output does not match {id} in docs/cli.md:\n{}\n{value:#}",
            problems.join("\n")
        );
    }

    /// Asserts that each of `lines` (what `--jsonl` printed) matches the items of the list
    /// `list` in the schema `id`.
    #[track_caller]
    pub fn assert_lines_match(&self, id: &str, list: &str, lines: &[Value]) {
        let items = &self.schema(id)["properties"][list]["items"];
        for line in lines {
            let mut problems = Vec::new();
            self.check(items, line, "$", &mut problems);
            assert!(
                problems.is_empty(),
                "a line does not match the {list} of {id} in docs/cli.md:\n{}\n{line:#}",
                problems.join("\n")
            );
        }
    }

    /// The part of JSON Schema the page uses. A keyword this does not know fails the test rather
    /// than passing unchecked.
    fn check(&self, schema: &Value, value: &Value, path: &str, problems: &mut Vec<String>) {
        let schema = schema.as_object().expect("a schema is an object");
        for (keyword, rule) in schema {
            match keyword.as_str() {
                "$id" | "title" | "description" => {}
                "$ref" => {
                    let target = rule.as_str().expect("$ref names a schema");
                    self.check(self.schema(target), value, path, problems);
                }
                "allOf" => {
                    for part in rule.as_array().expect("allOf is a list") {
                        self.check(part, value, path, problems);
                    }
                }
                "type" => {
                    let types: Vec<&str> = match rule {
                        Value::String(one) => vec![one.as_str()],
                        list => list
                            .as_array()
                            .expect("type is a name or a list")
                            .iter()
                            .filter_map(Value::as_str)
                            .collect(),
                    };
                    if !types.iter().any(|name| is_of_type(value, name)) {
                        problems.push(format!("{path}: {value} is not of type {types:?}"));
                    }
                }
                "enum" => {
                    if !rule.as_array().expect("enum is a list").contains(value) {
                        problems.push(format!("{path}: {value} is not one of {rule}"));
                    }
                }
                "format" => {
                    assert_eq!(rule, "date-time", "the only format used");
                    if let Some(text) = value.as_str()
                        && chrono::DateTime::parse_from_rfc3339(text).is_err()
                    {
                        problems.push(format!("{path}: {text:?} is not an RFC 3339 time"));
                    }
                }
                "required" => {
                    for name in rule.as_array().expect("required is a list") {
                        let name = name.as_str().expect("a field name");
                        if value
                            .as_object()
                            .is_some_and(|object| !object.contains_key(name))
                        {
                            problems.push(format!("{path}: no field {name:?}"));
                        }
                    }
                }
                "properties" => {
                    for (name, property) in rule.as_object().expect("properties is an object") {
                        if let Some(field) = value.get(name) {
                            self.check(property, field, &format!("{path}.{name}"), problems);
                        }
                    }
                }
                "additionalProperties" => {
                    assert_eq!(rule, false, "only additionalProperties: false is used");
                    let documented = schema["properties"].as_object();
                    for name in value
                        .as_object()
                        .into_iter()
                        .flat_map(|object| object.keys())
                    {
                        if !documented.is_some_and(|documented| documented.contains_key(name)) {
                            problems.push(format!("{path}: field {name:?} is not documented"));
                        }
                    }
                }
                "items" => {
                    for (index, item) in value.as_array().into_iter().flatten().enumerate() {
                        self.check(rule, item, &format!("{path}[{index}]"), problems);
                    }
                }
                other => {
                    panic!("docs/cli.md uses the keyword {other:?}, which this test does not check")
                }
            }
        }
    }
}

fn is_of_type(value: &Value, name: &str) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        other => panic!("unknown type {other:?} in docs/cli.md"),
    }
}

/// What `--jsonl` printed: one JSON object a line, and nothing else.
#[track_caller]
pub fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not JSON ({error}): {line:?}"))
        })
        .collect()
}
