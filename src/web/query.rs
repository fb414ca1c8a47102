//! What a request's address may hold, checked in one place before any route reads it: the
//! address's length ([`within_bounds`]), and each query parameter a route takes
//! ([`Params`], from its [`Query`]): UTF-8 text with no control character, no longer than what
//! it names can be, one of the words it takes, or a number in its range. What is refused is a
//! 400 `bad-query` (414 `uri-too-long` for the address) whose message names the parameter and
//! what it takes, in the API's JSON under `/api/` and in the layout on a page; no refusal
//! repeats more than a few dozen bytes of what was sent.

use axum::extract::{FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::ApiError;

/// The longest address read, bytes: four times the longest a page of the console links (a
/// runs page with every filter and a cursor), far under what the HTTP library refuses on its
/// own (64 KiB), so that an address too long is answered here, in the API's shape.
pub(crate) const LONGEST_URI: usize = 8192;

/// The longest job, queue or workflow name, bytes: `schedule::check_name`'s bound, which no
/// name published passes (a test holds the two together). A name, or part of one, asked for
/// in a query is no longer.
pub(crate) const LONGEST_NAME: usize = 128;

/// The most entries a page of a list holds: what `limit` takes at most.
pub(crate) const MAX_LIMIT: usize = 1000;

/// A job's name, or part of one.
pub(crate) const JOB: Takes = Takes::name("a job's name");

/// A queue's name.
pub(crate) const QUEUE: Takes = Takes::name("a queue's name");

/// A replica's id, which is no longer than a name.
pub(crate) const REPLICA: Takes = Takes::name("a replica's id");

/// A workflow's name.
pub(crate) const WORKFLOW: Takes = Takes::name("a workflow's name");

/// The longest run or workflow instance id, bytes: a job's name and a fire's instant or a
/// replica's id, or a UUID, are shorter.
pub(crate) const LONGEST_ID: usize = 2 * LONGEST_NAME;

/// A run's id.
pub(crate) const RUN_ID: Takes = Takes::Text {
    what: "a run's id",
    longest: LONGEST_ID,
};

/// An instant, RFC 3339, or a span before now (`2h`).
pub(crate) const INSTANT: Takes = Takes::Text {
    what: "an RFC 3339 instant or a span such as 2h",
    longest: 64,
};

/// A page's `next_cursor`: a run's id, a ready list's key and a window, hexadecimal, which no
/// cursor a page gives is half as long as.
pub(crate) const CURSOR: Takes = Takes::Text {
    what: "the next_cursor of a page",
    longest: 2048,
};

/// How many bytes of a value or name sent a refusal repeats.
pub(crate) const SHOWN: usize = 40;

/// How many bytes of a path a refusal repeats: any of a route's, with a run's id in it.
pub(crate) const SHOWN_PATH: usize = 4 * LONGEST_NAME;

/// What one query parameter takes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Takes {
    /// Text of at most `longest` bytes, said as `what` ("a job's name").
    Text {
        /// What the text names, for the refusal.
        what: &'static str,
        /// Its longest, bytes.
        longest: usize,
    },
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// A page's size: a whole number from 1 to [`MAX_LIMIT`].
    Limit,
    /// `true` or `false`.
    Flag,
    /// A whole number, as a count.
    Whole,
    /// JSON text of at most `longest` bytes (a run's payload): the white space of a text box,
    /// lines and tabs, is no control character refused.
    Json {
        /// Its longest, bytes.
        longest: usize,
    },
}

impl Takes {
    /// A name (a job's, a queue's, a workflow's), or part of one.
    pub(crate) const fn name(what: &'static str) -> Self {
        Takes::Text {
            what,
            longest: LONGEST_NAME,
        }
    }

    /// What it takes, in words: the end of "`limit` must be ...".
    fn allowed(self) -> String {
        match self {
            Takes::Text { what, longest } => format!("{what} of at most {longest} bytes"),
            Takes::OneOf(words) => format!("one of {}", words.join(", ")),
            Takes::Limit => format!("a whole number from 1 to {MAX_LIMIT}"),
            Takes::Flag => "true or false".to_owned(),
            Takes::Whole => "a whole number".to_owned(),
            Takes::Json { longest } => format!("JSON text of at most {longest} bytes"),
        }
    }

    /// Whether `character` is one no value it takes holds.
    fn refuses(self, character: char) -> bool {
        character.is_control()
            && !(matches!(self, Takes::Json { .. }) && matches!(character, '\t' | '\n' | '\r'))
    }

    /// Whether `value` (UTF-8, no control character, not empty) is one it takes.
    fn takes(self, value: &str) -> bool {
        match self {
            Takes::Text { longest, .. } | Takes::Json { longest } => value.len() <= longest,
            Takes::OneOf(words) => words.contains(&value),
            Takes::Limit => {
                value.bytes().all(|byte| byte.is_ascii_digit())
                    && value
                        .parse::<usize>()
                        .is_ok_and(|limit| (1..=MAX_LIMIT).contains(&limit))
            }
            Takes::Flag => matches!(value, "true" | "false"),
            Takes::Whole => {
                value.bytes().all(|byte| byte.is_ascii_digit()) && value.parse::<u64>().is_ok()
            }
        }
    }
}

/// A route's query: the parameters it takes, which [`Params`] checks before deserializing
/// it (an empty value is one not given).
pub(crate) trait Query: DeserializeOwned {
    /// Each parameter's name and what it takes.
    const PARAMETERS: &'static [(&'static str, Takes)];
}

/// A route's query parameters, checked against its [`Query`]: one it does not take, one given
/// twice, or a value it does not take is a 400 `bad-query` naming the parameter (a page draws
/// it in the layout).
pub(crate) struct Params<T>(pub T);

impl<T: Query, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parse(parts.uri.query().unwrap_or_default()).map(Params)
    }
}

/// A route that takes no query: any parameter is refused, as on the routes that take some.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct NoQuery {}

impl Query for NoQuery {
    const PARAMETERS: &'static [(&'static str, Takes)] = &[];
}

/// What a form, or a query, is read from, for the refusal's code and words.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// An address's query: a 400 `bad-query`.
    Query,
    /// A form's body: a 400 `bad-body`.
    Form,
}

/// `query` (as an address carries it, without `?`) read as `T` once each parameter is checked.
///
/// # Errors
/// A 400 `bad-query` naming the first parameter `T` does not take as given.
pub(crate) fn parse<T: Query>(query: &str) -> Result<T, ApiError> {
    read(query, &[], Source::Query)
}

/// A form's body (`application/x-www-form-urlencoded`) read as `T` once each field is checked
/// as a query's parameters are, `also` (the form's token) taken besides `T`'s.
///
/// # Errors
/// A 400 `bad-body` naming the first field `T` does not take as given.
pub(crate) fn parse_form<T: Query>(
    form: &[u8],
    also: &[(&'static str, Takes)],
) -> Result<T, ApiError> {
    let text = std::str::from_utf8(form).map_err(|_| {
        ApiError::bad_request("bad-body", "the form is not URL-encoded text".to_owned())
    })?;
    read(text, also, Source::Form)
}

/// `text` (a query or a form) read as `T`, each pair checked against `T`'s parameters and
/// `also`'s.
fn read<T: Query>(
    text: &str,
    also: &[(&'static str, Takes)],
    source: Source,
) -> Result<T, ApiError> {
    let (code, what, holder) = match source {
        Source::Query => ("bad-query", "parameter", "this address"),
        Source::Form => ("bad-body", "field", "this form"),
    };
    let refused = |message: String| ApiError::bad_request(code, message);
    let mut given: Vec<(&'static str, String)> = Vec::new();
    for pair in text.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let name = decoded(name).unwrap_or_default();
        let Some(&(name, takes)) = T::PARAMETERS
            .iter()
            .chain(also)
            .find(|(known, _)| *known == name)
        else {
            let known: Vec<&str> = T::PARAMETERS.iter().map(|(known, _)| *known).collect();
            let takes = match known.as_slice() {
                [] => format!("{holder} takes none"),
                known => format!("{holder} takes {}", known.join(", ")),
            };
            return Err(refused(format!(
                "unknown {what} \"{}\": {takes}",
                shown(&name, SHOWN)
            )));
        };
        if given.iter().any(|(seen, _)| *seen == name) {
            return Err(refused(format!("{name} is given twice: give it once")));
        }
        let must = || format!("{name} must be {}", takes.allowed());
        let Some(value) = decoded(value) else {
            return Err(refused(format!(
                "{}; its percent-escapes are not UTF-8 text",
                must()
            )));
        };
        if let Some(control) = value.chars().find(|character| takes.refuses(*character)) {
            return Err(refused(format!(
                "{}; it holds the control character U+{:04X}",
                must(),
                u32::from(control)
            )));
        }
        if value.is_empty() {
            continue;
        }
        if !takes.takes(&value) {
            let why = match takes {
                Takes::Text { .. } | Takes::Json { .. } => {
                    format!("; this one is {} bytes", value.len())
                }
                _ => format!(", not \"{}\"", shown(&value, SHOWN)),
            };
            return Err(refused(format!("{}{why}", must())));
        }
        given.push((name, value));
    }
    // Every value is now one its field reads: only a field left out that the route needs
    // fails here (or a route whose fields and parameters disagree, which the API's test
    // against its OpenAPI document, and the pages' tests of their filters, would find).
    serde_urlencoded::to_string(&given)
        .ok()
        .and_then(|checked| serde_urlencoded::from_str(&checked).ok())
        .ok_or_else(|| {
            let known: Vec<&str> = T::PARAMETERS.iter().map(|(known, _)| *known).collect();
            refused(format!(
                "{holder} needs each of its {what}s given: {}",
                known.join(", ")
            ))
        })
}

/// `text` of a query with its `+` and percent-escapes decoded; `None` when they are not UTF-8.
/// A `%` not followed by two hexadecimal digits stands for itself, as browsers send it.
fn decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = (bytes[at] == b'%')
            .then(|| bytes.get(at + 1..at + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[at], escaped) {
            (_, Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (b'+', None) => {
                out.push(b' ');
                at += 1;
            }
            (byte, None) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// At most the first `longest` bytes of `text`, and `…` when there was more: what a refusal
/// repeats of what was sent, so that no answer grows with the request.
pub(crate) fn shown(text: &str, longest: usize) -> String {
    if text.len() <= longest {
        return text.to_owned();
    }
    let mut end = longest;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Refuses an address longer than [`LONGEST_URI`] with a 414 `uri-too-long` naming its longest
/// query parameter (its name and value together) (a page draws it in the layout), before any route reads it: no route then
/// reads, or repeats, more than that.
pub(crate) async fn within_bounds(request: Request, next: Next) -> Response {
    let uri = request.uri();
    let length = uri.path_and_query().map_or(0, |whole| whole.as_str().len());
    if length <= LONGEST_URI {
        return next.run(request).await;
    }
    let longest = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .max_by_key(|pair| pair.len())
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let name = pair.split_once('=').map_or(pair, |(name, _)| name);
            format!(
                "; its longest parameter, \"{}\", is {} bytes with its name",
                shown(&decoded(name).unwrap_or_default(), SHOWN),
                pair.len()
            )
        })
        .unwrap_or_default();
    ApiError::new(
        StatusCode::URI_TOO_LONG,
        "uri-too-long",
        format!(
            "the address is {length} bytes, more than the {LONGEST_URI} this server reads{longest}"
        ),
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Asked {
        job: Option<String>,
        state: Option<String>,
        limit: Option<usize>,
        #[serde(default)]
        failed: bool,
    }

    impl Query for Asked {
        const PARAMETERS: &'static [(&'static str, Takes)] = &[
            ("job", Takes::name("a job's name")),
            ("state", Takes::OneOf(&["paused", "drifting"])),
            ("limit", Takes::Limit),
            ("failed", Takes::Flag),
        ];
    }

    fn refusal(query: &str) -> String {
        let error = parse::<Asked>(query).expect_err(query);
        assert_eq!(
            (error.status, error.code),
            (StatusCode::BAD_REQUEST, "bad-query")
        );
        error.message
    }

    #[test]
    fn each_parameter_is_read_once_checked() {
        let asked =
            parse::<Asked>("job=a+b%2Fc&state=paused&limit=1000&failed=true").expect("fine");
        assert_eq!(asked.job.as_deref(), Some("a b/c"));
        assert_eq!(asked.state.as_deref(), Some("paused"));
        assert_eq!((asked.limit, asked.failed), (Some(1000), true));
        // An empty value is one not given, as a form's empty field sends it.
        let empty = parse::<Asked>("job=&state=&limit=&failed=").expect("fine");
        assert_eq!((empty.job, empty.state, empty.limit), (None, None, None));
        assert_eq!(
            parse::<Asked>("job=100%").expect("fine").job.as_deref(),
            Some("100%")
        );
    }

    #[test]
    fn a_refusal_names_the_parameter_and_what_it_takes_in_the_houses_words() {
        for (query, said) in [
            (
                "limit=x",
                "limit must be a whole number from 1 to 1000, not \"x\"",
            ),
            (
                "limit=0",
                "limit must be a whole number from 1 to 1000, not \"0\"",
            ),
            (
                "limit=+5",
                "limit must be a whole number from 1 to 1000, not \" 5\"",
            ),
            (
                "limit=1001",
                "limit must be a whole number from 1 to 1000, not \"1001\"",
            ),
            (
                "state=bogus",
                "state must be one of paused, drifting, not \"bogus\"",
            ),
            ("failed=yes", "failed must be true or false, not \"yes\""),
            (
                "job=%FF%FE",
                "job must be a job's name of at most 128 bytes; its percent-escapes are not UTF-8 text",
            ),
            (
                "job=a%00",
                "job must be a job's name of at most 128 bytes; it holds the control character U+0000",
            ),
            ("job=a&job=b", "job is given twice: give it once"),
            (
                "colour=red",
                "unknown parameter \"colour\": this address takes job, state, limit, failed",
            ),
        ] {
            assert_eq!(refusal(query), said, "{query}");
        }
    }

    #[test]
    fn no_refusal_repeats_more_than_a_few_dozen_bytes_of_what_was_sent() {
        let long = "x".repeat(65_536);
        for query in [
            format!("job={long}"),
            format!("state={long}"),
            format!("limit={long}"),
            format!("{long}=1"),
        ] {
            let said = refusal(&query);
            assert!(said.len() < 200, "{said}");
        }
        assert_eq!(
            refusal(&format!("job={}", "a".repeat(129))),
            "job must be a job's name of at most 128 bytes; this one is 129 bytes"
        );
        assert!(parse::<Asked>(&format!("job={}", "a".repeat(128))).is_ok());
        assert_eq!(shown("é".repeat(30).as_str(), 41).len(), 20 * 2 + "…".len());
    }

    #[test]
    fn the_longest_name_asked_for_is_the_longest_a_job_may_have() {
        let longest = "a".repeat(LONGEST_NAME);
        assert!(crate::schedule::check_name(&longest).is_ok());
        assert!(crate::schedule::check_name(&format!("{longest}a")).is_err());
    }
}
