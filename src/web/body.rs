//! What a request's body may hold, checked in one place before any action reads it: its size
//! ([`bytes_of`], a 413 `body-too-large` past [`LONGEST_BODY`]), and a JSON body's fields
//! ([`Body`], from its [`Fields`]): a JSON object, each field one the route takes and of the
//! type it takes. What is refused is a 400 `bad-body` whose message names the field and what
//! it takes in the house's words, repeating no more than a few dozen bytes of what was sent.
//! A form's fields are checked as a query's are (`query::parse_form`).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::ApiError;
use super::query::{SHOWN, shown};

/// The largest body read, bytes: the HTTP library's default bound, said in the refusal.
pub(crate) const LONGEST_BODY: usize = 2 * 1024 * 1024;

/// The whole body of `request`: one past [`LONGEST_BODY`] is a 413 `body-too-large`, one that
/// cannot be read a 400 `bad-body`.
///
/// # Errors
/// As said.
pub(crate) async fn bytes_of<S: Send + Sync>(
    request: Request,
    state: &S,
) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, state)
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body-too-large",
                    format!("the body is longer than the {LONGEST_BODY} bytes this server reads"),
                )
            } else {
                ApiError::bad_request("bad-body", "the body could not be read to its end")
            }
        })
}

/// One field of a JSON body: its name, what it takes in words ("a whole number of
/// milliseconds"), and the longest a string of it may be, bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    /// The field's name.
    pub(crate) name: &'static str,
    /// What it takes, in words: the end of "`delay_ms` must be ...".
    pub(crate) takes: &'static str,
    /// The longest string it takes, bytes (a number's or a flag's is never a string).
    pub(crate) longest: usize,
}

impl Field {
    /// A field of `name` taking `takes`, with no string bound of its own.
    pub(crate) const fn new(name: &'static str, takes: &'static str) -> Self {
        Self {
            name,
            takes,
            longest: LONGEST_BODY,
        }
    }

    /// A field of `name` taking a string of at most `longest` bytes, said as `takes`.
    pub(crate) const fn text(name: &'static str, takes: &'static str, longest: usize) -> Self {
        Self {
            name,
            takes,
            longest,
        }
    }
}

/// A route's JSON body: the fields it takes, which [`Body`] checks before deserializing it.
pub(crate) trait Fields: DeserializeOwned + Default {
    /// Each field the body may hold.
    const FIELDS: &'static [Field];
}

/// A body that takes no field: none, or `{}`.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct NoFields {}

impl Fields for NoFields {
    const FIELDS: &'static [Field] = &[];
}

/// A route's JSON body, optional: none (or only white space) is `T::default()`, and one that
/// is not what the route takes is a 400 `bad-body` naming what is wrong.
pub(crate) struct Body<T>(pub T);

impl<T: Fields, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = bytes_of(request, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Body(T::default()));
        }
        parse(&bytes).map(Body)
    }
}

/// `bytes` read as `T` once each field is checked.
fn parse<T: Fields>(bytes: &[u8]) -> Result<T, ApiError> {
    let refused = |message: String| ApiError::bad_request("bad-body", message);
    let names: Vec<&str> = T::FIELDS.iter().map(|field| field.name).collect();
    let takes = match names.as_slice() {
        [] => "this route takes none".to_owned(),
        names => format!("this route takes {}", names.join(", ")),
    };
    let object: Map<String, Value> = serde_json::from_slice(bytes).map_err(|_| {
        refused(format!(
            "the body must be a JSON object, or nothing; {takes}"
        ))
    })?;
    for (name, value) in &object {
        let Some(field) = T::FIELDS.iter().find(|field| field.name == name) else {
            return Err(refused(format!(
                "unknown field \"{}\": {takes}",
                shown(name, SHOWN)
            )));
        };
        let must = format!("{name} must be {}", field.takes);
        if let Value::String(text) = value
            && text.len() > field.longest
        {
            return Err(refused(format!("{must}; this one is {} bytes", text.len())));
        }
        // Read alone, so that the refusal names the field whose value it does not take.
        let alone = Map::from_iter([(name.clone(), value.clone())]);
        if serde_json::from_value::<T>(Value::Object(alone)).is_err() {
            return Err(refused(must));
        }
    }
    serde_json::from_value(Value::Object(object))
        .map_err(|_| refused(format!("the body is not one this route takes; {takes}")))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Asked {
        job: Option<String>,
        count: Option<u64>,
    }

    impl Fields for Asked {
        const FIELDS: &'static [Field] = &[
            Field::text("job", "a job's name of at most 128 bytes", 128),
            Field::new("count", "a whole number"),
        ];
    }

    fn refusal<T: Fields + std::fmt::Debug>(body: &str) -> String {
        let error = parse::<T>(body.as_bytes()).expect_err(body);
        assert_eq!(
            (error.status, error.code),
            (StatusCode::BAD_REQUEST, "bad-body")
        );
        error.message
    }

    #[test]
    fn a_refusal_names_the_field_and_what_it_takes_in_the_houses_words() {
        for (body, said) in [
            (
                "{1:2}",
                "the body must be a JSON object, or nothing; this route takes job, count",
            ),
            (
                "null",
                "the body must be a JSON object, or nothing; this route takes job, count",
            ),
            ("{\"count\":-5}", "count must be a whole number"),
            ("{\"count\":\"abc\"}", "count must be a whole number"),
            (
                "{\"job\":3}",
                "job must be a job's name of at most 128 bytes",
            ),
            (
                "{\"colour\":1}",
                "unknown field \"colour\": this route takes job, count",
            ),
        ] {
            assert_eq!(refusal::<Asked>(body), said, "{body}");
        }
        assert_eq!(
            refusal::<NoFields>("{\"x\":1}"),
            "unknown field \"x\": this route takes none"
        );
        let asked = parse::<Asked>(b"{\"job\":\"a\",\"count\":3}").expect("fine");
        assert_eq!((asked.job.as_deref(), asked.count), (Some("a"), Some(3)));
    }

    #[test]
    fn no_refusal_repeats_more_than_a_few_dozen_bytes_of_what_was_sent() {
        let long = "a".repeat(1 << 20);
        for body in [
            format!("{{\"{long}\":1}}"),
            format!("{{\"job\":\"{long}\"}}"),
            format!("{{\"count\":\"{long}\"}}"),
            format!("[\"{long}\""),
        ] {
            let said = refusal::<Asked>(&body);
            assert!(said.len() < 200, "{said}");
        }
    }
}
