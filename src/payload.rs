//! The rules a run's payload obeys, checked where a run is asked for (the client, the CLI) and
//! again where it is read (the worker, the workflow starter).

/// The largest payload a run may carry, in bytes.
///
/// ```
/// use redcron::payload::{MAX_PAYLOAD_BYTES, payload_problem};
///
/// // Valid JSON, one byte too long.
/// let payload = format!("\"{}\"", "x".repeat(MAX_PAYLOAD_BYTES - 1));
/// assert!(payload_problem(&payload).is_some());
/// ```
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// Why `payload` cannot be handed to a handler, if it cannot: it must be JSON of at most
/// [`MAX_PAYLOAD_BYTES`]. Runs are written by other programs too (the library's bulk API, or
/// anything with access to Redis), so workers check what they read, not only what the CLI
/// accepts.
///
/// ```
/// use redcron::payload::payload_problem;
///
/// assert_eq!(payload_problem(r#"{"image": "cat.png"}"#), None);
/// let problem = payload_problem("cat.png").expect("not JSON");
/// assert!(problem.starts_with("the payload is not valid JSON"));
/// ```
pub fn payload_problem(payload: &str) -> Option<String> {
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Some(format!(
            "the payload is {} bytes: at most {MAX_PAYLOAD_BYTES} are accepted",
            payload.len()
        ));
    }
    serde_json::from_str::<serde::de::IgnoredAny>(payload)
        .err()
        .map(|error| format!("the payload is not valid JSON: {error}"))
}

/// Why `payload` cannot be a workflow's: it must be a JSON object, whose members every step
/// receives (see DESIGN.md, workflows).
pub fn object_problem(payload: &str) -> Option<String> {
    match serde_json::from_str::<serde_json::Value>(payload) {
        Ok(serde_json::Value::Object(_)) => None,
        Ok(_) => Some("a workflow's payload must be a JSON object".to_owned()),
        Err(error) => Some(format!("the payload is not valid JSON: {error}")),
    }
}
