//! docs/openapi.json holds against the real server: every documented operation is asked, it
//! answers with a documented status, and every field its schema requires is there with its type.

use std::time::Duration;

use serde_json::Value;

use crate::util::scenario::Scenario;
use crate::util::wait::wait_for;
use crate::util::web::WebProcess;

const JOBS: &str = "[jobs.greet]\ncommand = \"cat\"\n\n[jobs.doomed]\ncommand = \"exit 3\"\n\n\
                    [workflows.flow]\nsteps = [\"greet\"]\n";

/// Where `schema` (a `$ref` resolved against `document`) finds `value` wrong, each with its
/// JSON path; empty when it holds.
fn problems(document: &Value, schema: &Value, value: &Value, path: &str) -> Vec<String> {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.trim_start_matches("#/components/schemas/");
        return problems(
            document,
            &document["components"]["schemas"][name],
            value,
            path,
        );
    }
    if let Some(all) = schema["allOf"].as_array() {
        return all
            .iter()
            .flat_map(|part| problems(document, part, value, path))
            .collect();
    }
    let mut found = Vec::new();
    let types: Vec<&str> = match &schema["type"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let type_of = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(number) if number.is_i64() || number.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    if !types.is_empty() && !types.contains(&type_of) {
        return vec![format!(
            "{path}: {type_of}, documented as {types:?}: {value}"
        )];
    }
    if let Some(choices) = schema["enum"].as_array()
        && !choices.contains(value)
    {
        found.push(format!("{path}: {value} is none of {choices:?}"));
    }
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().expect("a field name");
        if value.get(name).is_none() {
            found.push(format!("{path}.{name}: documented, missing"));
        }
    }
    if let (Some(properties), Value::Object(fields)) = (schema["properties"].as_object(), value) {
        for (name, property) in properties {
            if let Some(field) = fields.get(name) {
                found.extend(problems(
                    document,
                    property,
                    field,
                    &format!("{path}.{name}"),
                ));
            }
        }
    }
    if let Value::Array(items) = value {
        for (at, item) in items.iter().enumerate() {
            found.extend(problems(
                document,
                &schema["items"],
                item,
                &format!("{path}[{at}]"),
            ));
        }
    }
    found
}

#[test]
fn every_documented_operation_answers_as_documented() {
    let document: Value =
        serde_json::from_str(include_str!("../docs/openapi.json")).expect("openapi.json is JSON");
    assert_eq!(document["openapi"], "3.1.0");
    let scenario = Scenario::new();
    scenario.write_jobs(JOBS);
    let _replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let ran = |job: &str, state: &str| {
        let id = wait_for(Duration::from_secs(15), || {
            let answer = web.post(
                &format!("/api/v1/jobs/{job}/trigger"),
                Some(r#"{"payload": [1]}"#),
            );
            (answer.status == 200).then(|| answer.json()["id"].as_str().map(str::to_owned))?
        })
        .unwrap_or_else(|| panic!("{job} was never published"));
        let ended = wait_for(Duration::from_secs(15), || {
            (web.get(&format!("/api/v1/runs/{id}")).json()["state"] == state).then_some(())
        });
        assert!(ended.is_some(), "{id} never became {state}");
        id
    };
    let succeeded = ran("greet", "succeeded");
    let dead = ran("doomed", "dead");
    let instance = wait_for(Duration::from_secs(15), || {
        let started = crate::util::cli(
            &scenario.server,
            scenario.dir.path(),
            &["workflow", "start", "flow", "--json"],
        );
        (started.code == Some(0)).then(|| {
            crate::util::one_document(&started.stdout)["id"]
                .as_str()
                .map(str::to_owned)
        })?
    })
    .expect("the workflow was published");

    // Each documented operation, asked as a script would; the order leaves a dead run for
    // the operations that need one.
    let asked: Vec<(&str, &str, String, Option<&str>)> = vec![
        ("status", "get", "/api/v1/status".into(), None),
        ("jobs", "get", "/api/v1/jobs".into(), None),
        ("job", "get", "/api/v1/jobs/greet".into(), None),
        ("pause", "post", "/api/v1/jobs/greet/pause".into(), None),
        ("resume", "post", "/api/v1/jobs/greet/resume".into(), None),
        (
            "trigger",
            "post",
            "/api/v1/jobs/greet/trigger".into(),
            Some(r#"{"payload": {"a": 1}}"#),
        ),
        (
            "enqueue",
            "post",
            "/api/v1/jobs/greet/enqueue".into(),
            Some(r#"{"delay_ms": 3600000}"#),
        ),
        ("runs", "get", "/api/v1/runs?limit=5".into(), None),
        ("run", "get", format!("/api/v1/runs/{succeeded}"), None),
        ("history", "get", "/api/v1/history".into(), None),
        ("dead", "get", "/api/v1/dead".into(), None),
        ("dead_run", "get", format!("/api/v1/dead/{dead}"), None),
        (
            "retry_dead",
            "post",
            format!("/api/v1/dead/{dead}/retry"),
            None,
        ),
        (
            "retry_dead_runs",
            "post",
            "/api/v1/dead/retry".into(),
            Some("{}"),
        ),
        (
            "purge_dead",
            "post",
            "/api/v1/dead/purge".into(),
            Some("{}"),
        ),
        (
            "workflows",
            "get",
            "/api/v1/workflows?workflow=flow".into(),
            None,
        ),
        (
            "workflow",
            "get",
            format!("/api/v1/workflows/{instance}"),
            None,
        ),
        (
            "retry_workflow",
            "post",
            format!("/api/v1/workflows/{instance}/retry"),
            None,
        ),
    ];
    let mut documented = Vec::new();
    for (route, operations) in document["paths"].as_object().expect("paths") {
        for (method, operation) in operations.as_object().expect("operations") {
            documented.push((
                operation["operationId"].as_str().expect("an id"),
                method,
                route,
            ));
        }
    }
    // Asked in the order above, whatever order the document lists them in.
    for (id, asked_method, path, body) in &asked {
        let (_, method, route) = documented
            .iter()
            .find(|(documented, ..)| documented == id)
            .unwrap_or_else(|| panic!("operation {id} is asked here and not documented"));
        assert_eq!(asked_method, method, "{id}");
        let answer = match *asked_method {
            "get" => web.get(path),
            _ => web.post(path, *body),
        };
        let responses = &document["paths"][route.as_str()][method.as_str()]["responses"];
        let schema = &responses[answer.status.to_string()];
        assert!(
            schema.is_object(),
            "{id}: status {} is not documented: {}",
            answer.status,
            answer.body
        );
        assert_eq!(answer.status, 200, "{id}: {}", answer.body);
        let schema = &schema["content"]["application/json"]["schema"];
        let found = problems(&document, schema, &answer.json(), "$");
        assert!(
            found.is_empty(),
            "{id} ({path}): {found:#?}\n{}",
            answer.body
        );
    }
    assert_eq!(
        documented.len(),
        asked.len(),
        "an operation asked here is not documented"
    );

    // An error answer is in the documented shape, with its documented status.
    let unknown = web.get("/api/v1/jobs/nope");
    let schema = &document["paths"]["/api/v1/jobs/{job}"]["get"]["responses"]["404"];
    assert_eq!(unknown.status, 404);
    let found = problems(
        &document,
        &schema["content"]["application/json"]["schema"],
        &unknown.json(),
        "$",
    );
    assert!(found.is_empty(), "{found:#?}");
}
