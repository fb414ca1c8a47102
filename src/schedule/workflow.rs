//! `[workflows.<name>]` tables: declared jobs run as the steps of one workflow, one after
//! another or as a DAG, started on demand or by a schedule of its own.
//!
//! ```toml
//! [workflows.images]
//! steps = ["compress", "watermark", "upload"]   # each step a declared job, one after another
//!
//! [workflows.report]
//! schedule = "0 6 * * *"
//! on_failure = "continue"
//! steps = [
//!   { job = "fetch-sales" },
//!   { job = "fetch-costs" },
//!   { job = "merge", needs = ["fetch-sales", "fetch-costs"] },
//! ]
//! ```
//!
//! A workflow is declared as a job of its own name, whose runs start an instance of it (see
//! DESIGN.md, workflows): its schedule fires like any job's, `redcron trigger` and `pause` work
//! on it, and its definition reaches Redis with the other jobs'.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::{Spanned, Value};

use chrono_tz::Tz;

use super::Schedule;
use super::file::{Diagnostic, FileContext, check_name, typed};
use super::job::{Delivery, Job, Misfire, Output, Overlap, Priority, Source};

/// The fields a workflow table may have, for the unknown-field message.
const FIELDS: [&str; 6] = [
    "steps",
    "on_failure",
    "schedule",
    "timezone",
    "misfire",
    "enabled",
];

/// How long a run that starts a workflow may take: it writes one hash and a run per first step.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a start is tried again: it fails while a step's job is declared by no live
/// replica (a deploy on its way), which a few minutes usually mend.
const START_RETRIES: u32 = 5;

/// What becomes of a workflow when one of its steps is dead (or skipped).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnFailure {
    /// No further step starts; the workflow is failed once its running steps end.
    #[default]
    Stop,
    /// The steps that need it run all the same (without its output); the workflow ends failed.
    Continue,
}

impl OnFailure {
    /// The word as schedule files and the scripts write it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Stop => "stop",
            OnFailure::Continue => "continue",
        }
    }
}

/// One step of a workflow: a run of `job` once every step it needs has succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Unique in its workflow; the job's name unless given.
    pub name: String,
    /// The declared job it runs.
    pub job: String,
    /// The steps that must succeed before it starts.
    pub needs: Vec<String>,
}

/// A workflow's steps and its failure policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workflow {
    /// In the order written; every step's needs are earlier or later steps, without a cycle.
    pub steps: Vec<Step>,
    /// What a dead step does to the rest.
    pub on_failure: OnFailure,
}

impl Workflow {
    /// The steps as a chain or a DAG, for people: `a -> b -> c`, or each step with its needs.
    pub fn describe(&self) -> String {
        let chain = self.steps.iter().enumerate().all(|(index, step)| {
            let previous = index.checked_sub(1).map(|index| &self.steps[index].name);
            step.needs.iter().collect::<Vec<_>>() == previous.into_iter().collect::<Vec<_>>()
        });
        if chain {
            let names: Vec<&str> = self.steps.iter().map(|step| step.name.as_str()).collect();
            return names.join(" -> ");
        }
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|step| match step.needs.as_slice() {
                [] => step.name.clone(),
                needs => format!("{} (needs {})", step.name, needs.join(", ")),
            })
            .collect();
        steps.join("; ")
    }
}

/// A workflow table as written: field name -> value, each with its byte span.
pub(super) type RawWorkflow = BTreeMap<Spanned<String>, Spanned<Value>>;

/// Reads one `[workflows.<name>]` table into the job that starts it; every problem found is
/// reported, each at its field.
pub(super) fn read_workflow(
    file: &FileContext<'_>,
    name: &Spanned<String>,
    table: RawWorkflow,
) -> Result<Job, Vec<Diagnostic>> {
    let mut reader = Reader {
        file,
        name,
        fields: table,
        diagnostics: Vec::new(),
    };
    let at = name.span().start;
    if let Err(problem) = check_name(name.get_ref()) {
        reader.report(at, None, format!("bad workflow name: {problem}"));
    }
    let steps = reader.take("steps", read_steps);
    let on_failure = reader.take("on_failure", typed::<OnFailure>);
    let schedule = reader.take("schedule", |value| {
        Schedule::parse(&typed::<String>(value)?).map_err(|error| error.to_string())
    });
    let timezone = reader.take("timezone", |value| {
        let zone = typed::<String>(value)?;
        zone.parse::<Tz>().map_err(|_| {
            format!(
                "unknown time zone \"{zone}\": expected an IANA name such as Europe/Paris, \
                 America/New_York or UTC"
            )
        })
    });
    let misfire = reader.take("misfire", typed::<Misfire>);
    let enabled = reader.take("enabled", typed::<bool>);
    let unknown: Vec<_> = std::mem::take(&mut reader.fields).into_keys().collect();
    for field in unknown {
        reader.report(
            field.span().start,
            Some(field.get_ref()),
            format!("unknown field: expected one of {}", FIELDS.join(", ")),
        );
    }
    let Some(steps) = steps else {
        if !reader
            .diagnostics
            .iter()
            .any(|diagnostic| diagnostic.field.as_deref() == Some(&reader.field("steps")))
        {
            reader.report(
                at,
                Some("steps"),
                "missing: a workflow needs steps = [\"job\", ...]".to_owned(),
            );
        }
        return Err(reader.diagnostics);
    };
    if !reader.diagnostics.is_empty() {
        return Err(reader.diagnostics);
    }
    Ok(Job {
        source: file.source(at),
        name: name.get_ref().clone(),
        schedule,
        timezone: timezone.unwrap_or(chrono_tz::UTC),
        command: String::new(),
        workdir: None,
        env: BTreeMap::new(),
        priority: Priority::Normal,
        queue: "default".to_owned(),
        timeout: START_TIMEOUT,
        retries: START_RETRIES,
        backoff: Duration::from_secs(30),
        max_backoff: Duration::from_secs(3600),
        // Each fire starts its own instance, however long the previous one runs: a start
        // takes milliseconds, and instances are independent.
        overlap: Overlap::Allow,
        max_concurrency: None,
        misfire: misfire.unwrap_or(Misfire::RunOnce),
        starting_deadline: None,
        jitter: Duration::ZERO,
        // Starting twice is harmless: an instance is created once, by its id.
        delivery: Delivery::AtLeastOnce,
        enabled: enabled.unwrap_or(true),
        user: None,
        group: None,
        output: Output::default(),
        notify: None,
        workflow: Some(Workflow {
            steps,
            on_failure: on_failure.unwrap_or_default(),
        }),
    })
}

/// Checks and types one workflow table's fields, collecting every problem.
struct Reader<'a> {
    file: &'a FileContext<'a>,
    name: &'a Spanned<String>,
    fields: RawWorkflow,
    diagnostics: Vec<Diagnostic>,
}

impl Reader<'_> {
    fn field(&self, which: &str) -> String {
        format!("workflows.{}.{which}", self.name.get_ref())
    }

    /// Removes `which` and converts its value; a failed conversion is reported at the value.
    fn take<T>(
        &mut self,
        which: &str,
        convert: impl FnOnce(Value) -> Result<T, String>,
    ) -> Option<T> {
        let value = self.fields.remove(which)?;
        let offset = value.span().start;
        match convert(value.into_inner()) {
            Ok(converted) => Some(converted),
            Err(message) => {
                self.report(offset, Some(which), message);
                None
            }
        }
    }

    fn report(&mut self, offset: usize, which: Option<&str>, message: String) {
        let field = which.map_or_else(
            || format!("workflows.{}", self.name.get_ref()),
            |which| self.field(which),
        );
        self.diagnostics.push(
            self.file
                .diagnostic(Some(offset), None, Some(&field), message),
        );
    }
}

/// A step as a table: `{ job = "...", name = "...", needs = [...] }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    job: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    needs: Vec<String>,
}

/// `steps`: a list of job names, run one after another, or a list of step tables, each
/// starting once the steps it `needs` have succeeded. Checks names, repeats, needs and cycles.
fn read_steps(value: Value) -> Result<Vec<Step>, String> {
    let Value::Array(entries) = value else {
        return Err("expected a list of job names, or of { job, needs } tables".to_owned());
    };
    if entries.is_empty() {
        return Err("a workflow needs at least one step".to_owned());
    }
    let steps: Vec<Step> = if entries.iter().all(Value::is_str) {
        let mut previous: Option<String> = None;
        entries
            .into_iter()
            .map(|entry| {
                let job = typed::<String>(entry)?;
                let needs = previous.replace(job.clone()).into_iter().collect();
                Ok(Step {
                    name: job.clone(),
                    job,
                    needs,
                })
            })
            .collect::<Result<_, String>>()?
    } else if entries.iter().all(Value::is_table) {
        entries
            .into_iter()
            .map(|entry| {
                let raw = typed::<RawStep>(entry)?;
                Ok(Step {
                    name: raw.name.unwrap_or_else(|| raw.job.clone()),
                    job: raw.job,
                    needs: raw.needs,
                })
            })
            .collect::<Result<_, String>>()?
    } else if entries
        .iter()
        .all(|entry| entry.is_str() || entry.is_table())
    {
        return Err(
            "a list of job names (one after another) or of { job, needs } tables (a DAG), not \
             both"
                .to_owned(),
        );
    } else {
        return Err(
            "expected a list of job names (one after another) or of { job, needs } tables (a \
             DAG)"
                .to_owned(),
        );
    };
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (at, step) in steps.iter().enumerate() {
        check_name(&step.job).map_err(|problem| format!("step job: {problem}"))?;
        check_name(&step.name).map_err(|problem| format!("step name: {problem}"))?;
        if index.insert(&step.name, at).is_some() {
            return Err(format!(
                "step \"{}\" is named twice: give one of them name = \"...\"",
                step.name
            ));
        }
    }
    for step in &steps {
        for need in &step.needs {
            if !index.contains_key(need.as_str()) {
                return Err(format!(
                    "step \"{}\" needs \"{need}\", which is not a step of this workflow",
                    step.name
                ));
            }
        }
        if step
            .needs
            .iter()
            .enumerate()
            .any(|(at, need)| step.needs[..at].contains(need))
        {
            return Err(format!("step \"{}\" needs a step twice", step.name));
        }
    }
    if let Some(cycle) = find_cycle(&steps, &index) {
        return Err(format!(
            "its steps wait for each other ({}): none of them could ever start",
            cycle.join(" -> ")
        ));
    }
    Ok(steps)
}

/// A cycle of needs, as the names along it (the first repeated at the end), if there is one.
fn find_cycle(steps: &[Step], index: &HashMap<&str, usize>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    fn visit(
        at: usize,
        steps: &[Step],
        index: &HashMap<&str, usize>,
        marks: &mut [Mark],
        path: &mut Vec<usize>,
    ) -> Option<Vec<String>> {
        marks[at] = Mark::OnPath;
        path.push(at);
        for need in &steps[at].needs {
            let next = index[need.as_str()];
            match marks[next] {
                Mark::OnPath => {
                    let start = path.iter().position(|&on| on == next).unwrap_or_default();
                    let mut cycle: Vec<String> = path[start..]
                        .iter()
                        .map(|&on| steps[on].name.clone())
                        .collect();
                    cycle.push(steps[next].name.clone());
                    // Read as "waits for": a needs b needs a.
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(cycle) = visit(next, steps, index, marks, path) {
                        return Some(cycle);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks[at] = Mark::Done;
        None
    }
    let mut marks = vec![Mark::New; steps.len()];
    (0..steps.len()).find_map(|at| {
        if marks[at] == Mark::New {
            visit(at, steps, index, &mut marks, &mut Vec::new())
        } else {
            None
        }
    })
}

/// The steps whose job is not declared in the directory (`jobs`), or is itself a workflow:
/// refused when the schedules load, not found out when the step cannot be enqueued.
pub(super) fn check_step_jobs(jobs: &[Job], declared: &[(String, Source)]) -> Vec<Diagnostic> {
    let plain: std::collections::HashSet<&str> = jobs
        .iter()
        .filter(|job| job.workflow.is_none())
        .map(|job| job.name.as_str())
        .collect();
    let mut diagnostics = Vec::new();
    for job in jobs {
        let Some(workflow) = &job.workflow else {
            continue;
        };
        for step in &workflow.steps {
            // A step naming a job that did not read well waits for that job's own problem.
            let invalid = || {
                declared.iter().any(|(name, _)| *name == step.job)
                    && !jobs.iter().any(|other| other.name == step.job)
            };
            if plain.contains(step.job.as_str()) || invalid() {
                continue;
            }
            let what = if jobs.iter().any(|other| other.name == step.job) {
                "a workflow: a step runs a job"
            } else {
                "not a job declared in this directory"
            };
            diagnostics.push(Diagnostic {
                path: job.source.path.clone(),
                position: Some((job.source.line, job.source.column)),
                job: None,
                field: Some(format!("workflows.{}.steps", job.name)),
                message: format!(
                    "step \"{}\" runs \"{}\", which is {what}",
                    step.name, step.job
                ),
            });
        }
    }
    diagnostics
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOBS: &str = "[jobs.a]\ncommand = \"true\"\n[jobs.b]\ncommand = \"true\"\n\
                        [jobs.c]\ncommand = \"true\"\n";

    fn load(workflow: &str) -> Result<Vec<Job>, Vec<String>> {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("jobs.toml"), format!("{JOBS}{workflow}")).expect("write");
        crate::schedule::load_dir(dir.path()).map_err(|error| {
            error
                .diagnostics
                .iter()
                .map(|diagnostic| {
                    let text = diagnostic.to_string();
                    text[text.find(": ").map_or(0, |at| at + 2)..].to_owned()
                })
                .collect()
        })
    }

    fn workflow_of(jobs: &[Job], name: &str) -> Workflow {
        jobs.iter()
            .find(|job| job.name == name)
            .and_then(|job| job.workflow.clone())
            .expect("the workflow's job")
    }

    #[test]
    fn a_list_of_names_is_a_chain_and_tables_make_a_dag() {
        let jobs = load("[workflows.chain]\nsteps = [\"a\", \"b\", \"c\"]\n").expect("loads");
        let chain = workflow_of(&jobs, "chain");
        assert_eq!(chain.describe(), "a -> b -> c");
        assert_eq!(chain.on_failure, OnFailure::Stop);
        let starter = jobs.iter().find(|job| job.name == "chain").expect("job");
        assert_eq!(starter.schedule, None);
        assert_eq!(starter.overlap, Overlap::Allow);

        let jobs = load(
            "[workflows.fan]\nschedule = \"0 6 * * *\"\non_failure = \"continue\"\nsteps = [\
             { job = \"a\" }, { job = \"b\", name = \"left\", needs = [\"a\"] }, \
             { job = \"b\", name = \"right\", needs = [\"a\"] }, \
             { job = \"c\", needs = [\"left\", \"right\"] }]\n",
        )
        .expect("loads");
        let fan = workflow_of(&jobs, "fan");
        assert_eq!(fan.on_failure, OnFailure::Continue);
        assert_eq!(
            fan.describe(),
            "a; left (needs a); right (needs a); c (needs left, right)"
        );
    }

    #[test]
    fn cycles_unknown_steps_and_repeated_names_are_refused_where_written() {
        let cases = [
            (
                "steps = [{ job = \"a\", needs = [\"c\"] }, { job = \"b\", needs = [\"a\"] }, \
                 { job = \"c\", needs = [\"b\"] }]",
                "field \"workflows.w.steps\": its steps wait for each other (a -> c -> b -> a)",
            ),
            (
                "steps = [{ job = \"a\", needs = [\"a\"] }]",
                "its steps wait for each other (a -> a)",
            ),
            (
                "steps = [{ job = \"a\", needs = [\"x\"] }]",
                "step \"a\" needs \"x\", which is not a step of this workflow",
            ),
            ("steps = [\"a\", \"a\"]", "step \"a\" is named twice"),
            (
                "steps = [\"a\", \"nope\"]",
                "step \"nope\" runs \"nope\", which is not a job declared in this directory",
            ),
            ("steps = []", "a workflow needs at least one step"),
            ("steps = [\"a\", { job = \"b\" }]", "not both"),
            ("steps = [1, 2]", "expected a list of job names"),
            ("on_failure = \"stop\"", "missing: a workflow needs steps"),
            (
                "steps = [\"a\"]\ncommand = \"x\"",
                "field \"workflows.w.command\": unknown field",
            ),
            (
                "steps = [\"a\"]\non_failure = \"halt\"",
                "unknown variant `halt`",
            ),
        ];
        for (table, expected) in cases {
            let found = load(&format!("[workflows.w]\n{table}\n")).expect_err(table);
            assert!(
                found.iter().any(|message| message.contains(expected)),
                "{table}: {found:?}"
            );
        }
        let twice = load("[workflows.a]\nsteps = [\"b\"]\n").expect_err("a job's name");
        assert!(twice[0].contains("declared twice"), "{twice:?}");
        let nested = load("[workflows.w]\nsteps = [\"a\"]\n[workflows.v]\nsteps = [\"w\"]\n")
            .expect_err("a workflow as a step");
        assert!(nested[0].contains("which is a workflow"), "{nested:?}");
    }

    #[test]
    fn a_workflow_job_reads_back_from_its_canonical_json() {
        let jobs = load("[workflows.w]\nsteps = [\"a\", \"b\"]\n").expect("loads");
        let job = jobs.iter().find(|job| job.name == "w").expect("job");
        let json = serde_json::to_string(job).expect("json");
        let back = Job::from_canonical_json(&json, &job.content_hash()).expect("reads back");
        assert_eq!(back.workflow, job.workflow);
    }
}
