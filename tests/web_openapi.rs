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
            Some(r#"{"all": true}"#),
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

/// Values of a documented query parameter that the document says the route does not take, each
/// with words its refusal must say; and one it takes at its bound, which no `bad-query` may
/// answer.
fn refused_values(name: &str, schema: &Value) -> (Vec<(String, Vec<String>)>, Option<String>) {
    let mut refused = vec![
        ("%FF%FE".to_owned(), vec!["not UTF-8".to_owned()]),
        ("a%00".to_owned(), vec!["control character".to_owned()]),
    ];
    let mut at_bound = None;
    if let Some(words) = schema["enum"].as_array() {
        let words: Vec<&str> = words.iter().filter_map(Value::as_str).collect();
        refused.push((
            "bogus".to_owned(),
            vec![format!("{name} must be one of {}", words.join(", "))],
        ));
    } else if schema["type"] == "integer" {
        let (lowest, highest) = (&schema["minimum"], &schema["maximum"]);
        let said = format!("{name} must be a whole number from {lowest} to {highest}");
        for value in [
            "x".to_owned(),
            format!("{}", highest.as_u64().expect("a maximum") + 1),
        ] {
            refused.push((value, vec![said.clone()]));
        }
        at_bound = Some(highest.to_string());
    } else if schema["type"] == "boolean" {
        refused.push((
            "yes".to_owned(),
            vec![format!("{name} must be true or false")],
        ));
    } else {
        let longest = schema["maxLength"]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}: a string documented with no maxLength"));
        let longest = usize::try_from(longest).expect("a length");
        refused.push((
            "a".repeat(longest + 1),
            vec![
                format!("{name} must be"),
                format!("at most {longest} bytes"),
            ],
        ));
        at_bound = Some("a".repeat(longest));
    }
    (refused, at_bound)
}

#[test]
fn every_documented_query_parameter_takes_what_the_document_says_and_no_more() {
    let document: Value =
        serde_json::from_str(include_str!("../docs/openapi.json")).expect("openapi.json is JSON");
    let scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let mut asked = 0;
    for (route, operations) in document["paths"].as_object().expect("paths") {
        if operations["get"].is_null() {
            continue;
        }
        // A route that documents no query parameter takes none.
        let query: Vec<&Value> = operations["get"]["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|parameter| parameter["in"] == "query")
            .collect();
        for parameter in &query {
            let name = parameter["name"].as_str().expect("a name");
            let (refused, at_bound) = refused_values(name, &parameter["schema"]);
            for (value, said) in refused {
                let path = format!("{route}?{name}={value}");
                let answer = web.get(&path);
                let shown: String = path.chars().take(100).collect();
                assert_eq!(answer.status, 400, "{shown}: {}", answer.body);
                let error = &answer.json()["error"];
                assert_eq!(error["code"], "bad-query", "{shown}: {}", answer.body);
                let message = error["message"].as_str().expect("a message");
                for words in said {
                    assert!(
                        message.contains(&words),
                        "{shown}: {message:?} lacks {words:?}"
                    );
                }
                assert!(answer.body.len() < 512, "{shown}: {}", answer.body);
                asked += 1;
            }
            if let Some(value) = at_bound {
                let answer = web.get(&format!("{route}?{name}={value}"));
                assert!(
                    answer.status != 400 || answer.json()["error"]["code"] != "bad-query",
                    "{route}?{name} at its documented bound: {}",
                    answer.body
                );
            }
        }
        // A parameter the route does not take is named, with those it takes.
        let answer = web.get(&format!("{route}?colour=red"));
        assert_eq!(answer.status, 400, "{route}: {}", answer.body);
        let message = answer.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.contains("unknown parameter \"colour\""),
            "{message}"
        );
        if query.is_empty() {
            assert!(message.contains("takes none"), "{route}: {message:?}");
        }
        for parameter in &query {
            let name = parameter["name"].as_str().expect("a name");
            assert!(message.contains(name), "{route}: {message:?} lacks {name}");
        }
    }
    assert!(asked > 40, "only {asked} refusals asked");
}
