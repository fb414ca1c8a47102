//! Where a job runs: the labels a replica carries, a job's `where` selector over them, and how
//! many of the matching replicas run each fire (`on`).

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Label keys every replica carries on its own: given by `--label`, they would lie about it.
pub const RESERVED_KEYS: [&str; 3] = ["host", "replica", "queue"];

/// One `key=value` pair: a label a replica carries, or a term of a job's `where`.
///
/// ```
/// use redcron::schedule::Label;
///
/// let label = Label::parse("role=web")?;
/// assert_eq!((label.key.as_str(), label.value.as_str()), ("role", "web"));
/// assert!(Label::parse("role").is_err());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Label {
    /// `[a-z0-9][a-z0-9._-]{0,62}`: what is labelled (`role`, `dc`, `host`).
    pub key: String,
    /// 1 to 128 letters, digits and `. _ - @`: host names and replica ids fit.
    pub value: String,
}

impl Label {
    /// A label from its parts, checked as [`Label::parse`] checks them.
    ///
    /// # Errors
    /// What is wrong with the key or the value.
    pub fn new(key: &str, value: &str) -> Result<Self, String> {
        let key_ok = key
            .bytes()
            .next()
            .is_some_and(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit())
            && key.len() <= 63
            && key.bytes().all(|byte| {
                byte.is_ascii_lowercase()
                    || byte.is_ascii_digit()
                    || matches!(byte, b'.' | b'_' | b'-')
            });
        if !key_ok {
            return Err(format!(
                "\"{key}\" is not a label key: [a-z0-9][a-z0-9._-]{{0,62}} (lower-case letters, \
                 digits, '.', '_' and '-')"
            ));
        }
        let value_ok = (1..=128).contains(&value.len())
            && value.bytes().all(|byte| {
                byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-' | b'@')
            });
        if !value_ok {
            return Err(format!(
                "\"{value}\" is not a label value: 1 to 128 letters, digits and . _ - @"
            ));
        }
        Ok(Self {
            key: key.to_owned(),
            value: value.to_owned(),
        })
    }

    /// Reads `key=value`.
    ///
    /// # Errors
    /// What is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some((key, value)) = text.split_once('=') else {
            return Err(format!("\"{text}\" is not key=value (role=web, say)"));
        };
        Self::new(key, value)
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

impl From<Label> for String {
    fn from(label: Label) -> Self {
        label.to_string()
    }
}

impl TryFrom<String> for Label {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Label::parse(&text)
    }
}

/// Reads the labels a replica is given, each text as `--label` and `REDCRON_LABELS` write it:
/// `key=value`, or several joined by commas (no label value holds a comma). A key is given one
/// value, as a replica carries one of each; `host`, `replica` and `queue` are its own.
///
/// ```
/// use redcron::schedule::given_labels;
///
/// let labels = given_labels(["role=web,dc=eu", "rack=4"])?;
/// assert_eq!(labels.len(), 3);
/// assert!(given_labels(["role=web", "role=db"]).is_err());
/// assert!(given_labels(["note=a,b"]).is_err_and(|why| why.contains("a comma separates")));
/// # Ok::<(), String>(())
/// ```
///
/// # Errors
/// The first label that is not `key=value`, has a reserved key, or gives a key a second value.
pub fn given_labels<'a>(texts: impl IntoIterator<Item = &'a str>) -> Result<Vec<Label>, String> {
    let mut labels: Vec<Label> = Vec::new();
    for text in texts {
        for piece in text.split(',') {
            let label = Label::parse(piece).map_err(|error| {
                if piece == text {
                    error
                } else {
                    format!(
                        "{error}, in \"{text}\": a comma separates two labels, and no label \
                         value holds one"
                    )
                }
            })?;
            if RESERVED_KEYS.contains(&label.key.as_str()) {
                return Err(format!(
                    "\"{}\" is a label every replica carries on its own (host=<host name>, \
                     replica=<id>, queue=<each queue it serves>): choose another key",
                    label.key
                ));
            }
            match labels.iter().find(|given| given.key == label.key) {
                Some(given) if *given == label => {}
                Some(given) => {
                    return Err(format!(
                        "\"{label}\" gives \"{}\" a second value after \"{given}\": a replica \
                         carries one value of each key, which a job's where names",
                        label.key
                    ));
                }
                None => labels.push(label),
            }
        }
    }
    Ok(labels)
}

/// The labels of one replica: those it was given (`--label`), and those it carries on its own,
/// `host=<host name>`, `replica=<replica id>` and `queue=<name>` for each queue it serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(BTreeSet<Label>);

impl Labels {
    /// The labels of the replica `replica_id` on `host`, serving `queues`, given `given`.
    pub fn of_replica(given: &[Label], host: &str, replica_id: &str, queues: &[String]) -> Self {
        let mut labels: BTreeSet<Label> = given.iter().cloned().collect();
        let own = [("host", host), ("replica", replica_id)]
            .into_iter()
            .chain(queues.iter().map(|queue| ("queue", queue.as_str())));
        // A host name or id outside the label charset is left out rather than refused: no
        // selector can name it then, which `status` shows.
        labels.extend(own.filter_map(|(key, value)| Label::new(key, value).ok()));
        Self(labels)
    }

    /// Whether the replica carries `label`.
    pub fn carries(&self, label: &Label) -> bool {
        self.0.contains(label)
    }

    /// Every label but the queues (the heartbeat publishes those apart), as `status` shows
    /// them: `dc=eu,host=web1,replica=web1,role=web`.
    pub fn published(&self) -> String {
        let shown: Vec<String> = self
            .0
            .iter()
            .filter(|label| label.key != "queue")
            .map(Label::to_string)
            .collect();
        shown.join(",")
    }
}

/// A job's `where`: the labels a replica must all carry to run it. Empty: every replica.
///
/// ```
/// use redcron::schedule::{Label, Labels, Selector};
///
/// let web = Labels::of_replica(&[Label::parse("role=web")?], "web1", "web1", &[]);
/// let selector = Selector::parse(&["role=web".to_owned(), "host=web1".to_owned()])?;
/// assert!(selector.matches(&web));
/// assert!(!Selector::parse(&["role=db".to_owned()])?.matches(&web));
/// assert!(Selector::default().matches(&web));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Selector(Vec<Label>);

impl Selector {
    /// Reads the terms of a `where`, sorted, each once.
    ///
    /// # Errors
    /// The first term that is not `key=value`.
    pub fn parse(terms: &[String]) -> Result<Self, String> {
        let mut labels = terms
            .iter()
            .map(|term| Label::parse(term))
            .collect::<Result<Vec<_>, _>>()?;
        labels.sort();
        labels.dedup();
        Ok(Self(labels))
    }

    /// Whether a replica with `labels` runs the job: it carries every term.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.0.iter().all(|term| labels.carries(term))
    }

    /// Whether there is no term (every replica matches).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a term names one machine (`host=`) or one replica (`replica=`): the replicas
    /// matched then do that machine's work, whichever of them runs a fire.
    pub fn pins_one_machine(&self) -> bool {
        self.0
            .iter()
            .any(|term| matches!(term.key.as_str(), "host" | "replica"))
    }

    /// Why no replica can match this `where`, if none can: two values of one key. A replica
    /// carries one value of each key (`run` refuses a key given twice), but one `queue=` per
    /// queue it serves, so only `queue=` terms may name several values.
    ///
    /// ```
    /// use redcron::schedule::Selector;
    ///
    /// let both = Selector::parse(&["role=web".to_owned(), "role=db".to_owned()])?;
    /// assert!(both.impossible().is_some_and(|why| why.contains("\"role=db\" and \"role=web\"")));
    /// let queues = Selector::parse(&["queue=a".to_owned(), "queue=b".to_owned()])?;
    /// assert_eq!(queues.impossible(), None);
    /// # Ok::<(), String>(())
    /// ```
    pub fn impossible(&self) -> Option<String> {
        let (first, second) = self.conflict()?;
        Some(format!(
            "\"{first}\" and \"{second}\" cannot both hold: a replica carries one value of each \
             label key (only queue= repeats, once per queue it serves), so no replica would run \
             the job; keep one of them, or give the replicas meant a label they share",
        ))
    }

    /// The first two terms that make this `where` [impossible](Selector::impossible): two
    /// values of one key other than `queue`, in their sorted order. For a caller that must
    /// say where each came from (`import-crontab` names its options).
    pub fn conflict(&self) -> Option<(&Label, &Label)> {
        // Sorted: terms of one key are neighbours.
        self.0
            .windows(2)
            .map(|pair| (&pair[0], &pair[1]))
            .find(|(first, second)| first.key == second.key && first.key != "queue")
    }

    /// Why the runs of a job whose fires run once (`on = "one"`), waiting in `queue`, do not
    /// go where this `where` sends them, if they do not: its `queue=` terms name other queues.
    /// Only a replica that serves `queue` claims them, so the `where` alone would pick
    /// replicas that may never see a run; a job meant for replicas serving both says both.
    ///
    /// ```
    /// use redcron::schedule::Selector;
    ///
    /// let reports = Selector::parse(&["queue=reports".to_owned()])?;
    /// assert_eq!(reports.other_queue("reports"), None);
    /// assert!(reports.other_queue("default").is_some());
    /// # Ok::<(), String>(())
    /// ```
    pub fn other_queue(&self, queue: &str) -> Option<String> {
        let mut queues = self.0.iter().filter(|term| term.key == "queue");
        let named = queues.clone().next()?;
        if queues.any(|term| term.value == queue) {
            return None;
        }
        Some(format!(
            "\"{named}\" picks replicas serving queue \"{}\", but the job's runs wait in queue \
             \"{queue}\", which only replicas serving \"{queue}\" claim: set queue = \"{}\" \
             (where is then not needed), or add \"queue={queue}\" to where for replicas \
             serving both",
            named.value, named.value
        ))
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms: Vec<String> = self.0.iter().map(Label::to_string).collect();
        f.write_str(&terms.join(","))
    }
}

/// How many of the replicas that run a job run each of its fires.
///
/// ```
/// use redcron::schedule::Reach;
///
/// // Spelled as in schedule files.
/// let reach: Reach = serde_json::from_str(r#""every""#)?;
/// assert_eq!(reach, Reach::Every);
/// assert_eq!(Reach::default(), Reach::One);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reach {
    /// One of them, whichever claims it first: a cluster-wide job.
    #[default]
    One,
    /// Each of them, a run of its own per replica: per-host work, as a crontab line on every
    /// machine would do it.
    Every,
}

impl Reach {
    /// Whether this is [`Reach::One`]: left out of a definition's canonical form then, so that
    /// a job without `on` keeps the hash it had before the setting existed.
    pub fn is_one(&self) -> bool {
        *self == Reach::One
    }
}

/// Where a job runs, in words, as `check` and `jobs` say it: `None` for a job whose fires run
/// once on any replica.
///
/// ```
/// use redcron::schedule::{Reach, Selector, placement};
///
/// let web = Selector::parse(&["role=web".to_owned()])?;
/// assert_eq!(
///     placement(Reach::Every, &web).as_deref(),
///     Some("runs each fire on every replica with role=web")
/// );
/// assert_eq!(placement(Reach::One, &Selector::default()), None);
/// # Ok::<(), String>(())
/// ```
pub fn placement(on: Reach, selector: &Selector) -> Option<String> {
    let terms = selector.to_string().replace(',', ", ");
    match (on, selector.is_empty()) {
        (Reach::One, true) => None,
        (Reach::One, false) => Some(format!("runs once per fire, on a replica with {terms}")),
        (Reach::Every, true) => Some("runs each fire on every replica".to_owned()),
        (Reach::Every, false) => Some(format!("runs each fire on every replica with {terms}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_terms_are_checked() {
        assert!(Label::parse("dc=eu-west.1").is_ok());
        assert!(Label::parse("host=web1@example").is_ok());
        for bad in ["=web", "role=", "Role=web", "role=web server", "role"] {
            assert!(Label::parse(bad).is_err(), "{bad}");
        }
        assert!(Selector::parse(&["role=web".to_owned(), "nope".to_owned()]).is_err());
    }

    #[test]
    fn where_and_on_are_read_from_a_schedule_file_and_their_mistakes_named() {
        use std::path::Path;

        use crate::schedule::parse_file;

        let jobs = parse_file(
            Path::new("hosts.toml"),
            "[jobs.rotate]\nschedule = \"@daily\"\ncommand = \"logrotate\"\non = \"every\"\n\
             where = [\"role=web\", \"dc=eu\"]\n[jobs.report]\ncommand = \"report\"\n",
        )
        .expect("valid");
        assert_eq!(jobs[0].on, Reach::Every);
        assert_eq!(jobs[0].selector.to_string(), "dc=eu,role=web");
        assert_eq!(
            (jobs[1].on, jobs[1].selector.is_empty()),
            (Reach::One, true)
        );
        // Neither is in the canonical form of a job without them: its hash stays as it was.
        let plain = serde_json::to_string(&jobs[1]).expect("serializes");
        assert!(
            !plain.contains("where") && !plain.contains("\"on\""),
            "{plain}"
        );
        let errors = parse_file(
            Path::new("hosts.toml"),
            "[jobs.a]\nschedule = \"@daily\"\ncommand = \"x\"\nwhere = [\"role\"]\n\
             [jobs.b]\ncommand = \"x\"\non = \"every\"\n[jobs.c]\nschedule = \"@daily\"\n\
             command = \"x\"\non = \"all\"\n",
        )
        .expect_err("refused");
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 3, "{text:#?}");
        assert!(
            text[0].starts_with(
                "hosts.toml:4:9: job \"a\", field \"where\": \"role\" is not key=value"
            ),
            "{text:#?}"
        );
        assert!(
            text[1]
                .starts_with("hosts.toml:7:6: job \"b\", field \"on\": \"every\" needs a schedule")
                && text[1].contains("a job on every replica takes none"),
            "{text:#?}"
        );
        assert!(
            text[2].contains("job \"c\", field \"on\": unknown variant `all`"),
            "{text:#?}"
        );
    }

    #[test]
    fn a_replica_carries_its_host_id_and_queues() {
        let labels = Labels::of_replica(
            &[Label::parse("role=web").expect("valid")],
            "web1",
            "r1",
            &["images".to_owned()],
        );
        for term in ["role=web", "host=web1", "replica=r1", "queue=images"] {
            assert!(
                labels.carries(&Label::parse(term).expect("valid")),
                "{term}"
            );
        }
        assert_eq!(labels.published(), "host=web1,replica=r1,role=web");
    }
}
