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

use super::file::{Diagnostic, FileContext, RawTable, Table, check_name, schedule, typed, zone};
use super::job::{
    DEFAULT_BACKOFF, DEFAULT_MAX_BACKOFF, Delivery, Job, Misfire, Output, Overlap, Priority, Source,
};
use super::selector::{Reach, Selector};

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

/// Reads one `[workflows.<name>]` table into the job that starts it; every problem found is
/// reported, each at its field.
pub(super) fn read_workflow(
    file: &FileContext<'_>,
    name: &Spanned<String>,
    table: RawTable,
    uses: &mut Vec<StepUse>,
) -> Result<Job, Vec<Diagnostic>> {
    let mut table = Table::workflow(file, name, table);
    let at = table.at();
    if let Err(problem) = check_name(name.get_ref()) {
        table.report(at, None, format!("bad workflow name: {problem}"));
    }
    let steps = take_steps(&mut table, uses);
    let on_failure = table.take("on_failure", typed::<OnFailure>);
    let schedule = table.take("schedule", schedule);
    let timezone = table.take("timezone", zone);
    let misfire = table.take("misfire", typed::<Misfire>);
    let enabled = table.take("enabled", typed::<bool>);
    table.report_unknown(&FIELDS);
    let Some(steps) = steps else {
        if !table.has_reported("steps") {
            table.report(
                at,
                Some("steps"),
                "missing: a workflow needs steps = [\"job\", ...]".to_owned(),
            );
        }
        return Err(table.into_diagnostics());
    };
    if table.has_problems() {
        return Err(table.into_diagnostics());
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
        backoff: DEFAULT_BACKOFF,
        max_backoff: DEFAULT_MAX_BACKOFF,
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
        selector: Selector::default(),
        on: Reach::One,
        workflow: Some(Workflow {
            steps,
            on_failure: on_failure.unwrap_or_default(),
        }),
    })
}

/// Removes `steps` and reads it, each problem reported at the step it is about; the steps that
/// read at all go to `uses`, for the check of their jobs across files.
fn take_steps(table: &mut Table<'_>, uses: &mut Vec<StepUse>) -> Option<Vec<Step>> {
    let value = table.remove("steps")?;
    let span = value.span();
    let offsets = entry_offsets(table.file().text_at(span.clone()), span.start);
    let (steps, problems) = read_steps(value.into_inner(), &offsets, span.start);
    for (step, offset) in &steps {
        uses.push(StepUse {
            workflow: table.name().get_ref().clone(),
            step: step.name.clone(),
            job: step.job.clone(),
            source: table.file().source(*offset),
        });
    }
    let valid = problems.is_empty() && !steps.is_empty();
    for (offset, message) in problems {
        table.report(offset, Some("steps"), message);
    }
    valid.then(|| steps.into_iter().map(|(step, _)| step).collect())
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

/// Where each entry of the array written at `text` (which starts at byte `start` of its file)
/// begins, by re-reading that text: a value read into [`Value`] keeps no positions inside it.
/// Empty when it cannot be read so (its problems are then reported at the array).
fn entry_offsets(text: &str, start: usize) -> Vec<usize> {
    toml::de::ValueDeserializer::parse(text)
        .ok()
        .and_then(|entries| Vec::<Spanned<Value>>::deserialize(entries).ok())
        .map(|entries| {
            entries
                .iter()
                .map(|entry| start + entry.span().start)
                .collect()
        })
        .unwrap_or_default()
}

/// A problem of a workflow's steps, at the byte offset of the step it is about.
type Problem = (usize, String);

/// `steps`: a list of job names, run one after another, or a list of step tables, each
/// starting once the steps it `needs` have succeeded. The steps that read, each with where it
/// is written (`offsets`, else the array's `start`), and every problem, at the step it is about:
/// names, repeats, needs and cycles.
fn read_steps(value: Value, offsets: &[usize], start: usize) -> (Vec<(Step, usize)>, Vec<Problem>) {
    let at = |index: usize| offsets.get(index).copied().unwrap_or(start);
    let whole = |message: &str| (Vec::new(), vec![(start, message.to_owned())]);
    let Value::Array(entries) = value else {
        return whole("expected a list of job names, or of { job, needs } tables");
    };
    if entries.is_empty() {
        return whole("a workflow needs at least one step");
    }
    let chain = entries.iter().all(Value::is_str);
    if !chain && !entries.iter().all(Value::is_table) {
        return whole(
            if entries
                .iter()
                .all(|entry| entry.is_str() || entry.is_table())
            {
                "a list of job names (one after another) or of { job, needs } tables (a DAG), \
                 not both"
            } else {
                "expected a list of job names (one after another) or of { job, needs } tables \
                 (a DAG)"
            },
        );
    }
    let mut problems = Vec::new();
    let mut steps: Vec<(Step, usize)> = Vec::new();
    let mut previous: Option<String> = None;
    for (index, entry) in entries.into_iter().enumerate() {
        let step = if chain {
            typed::<String>(entry).map(|job| Step {
                name: job.clone(),
                needs: previous.replace(job.clone()).into_iter().collect(),
                job,
            })
        } else {
            typed::<RawStep>(entry).map(|raw| Step {
                name: raw.name.unwrap_or_else(|| raw.job.clone()),
                job: raw.job,
                needs: raw.needs,
            })
        };
        match step {
            Ok(step) => steps.push((step, at(index))),
            Err(message) => problems.push((at(index), message)),
        }
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (position, (step, offset)) in steps.iter().enumerate() {
        if let Err(problem) = check_name(&step.job) {
            problems.push((*offset, format!("step job: {problem}")));
        }
        if let Err(problem) = check_name(&step.name) {
            problems.push((*offset, format!("step name: {problem}")));
        }
        if index.insert(&step.name, position).is_some() {
            problems.push((
                *offset,
                format!(
                    "step \"{}\" is named twice: give one of them name = \"...\"",
                    step.name
                ),
            ));
        }
    }
    for (step, offset) in &steps {
        for need in &step.needs {
            if !index.contains_key(need.as_str()) {
                problems.push((
                    *offset,
                    format!(
                        "step \"{}\" needs \"{need}\", which is not a step of this workflow",
                        step.name
                    ),
                ));
            }
        }
        if step
            .needs
            .iter()
            .enumerate()
            .any(|(at, need)| step.needs[..at].contains(need))
        {
            problems.push((
                *offset,
                format!("step \"{}\" needs a step twice", step.name),
            ));
        }
    }
    // A cycle is sought among steps whose needs all name steps.
    if problems.is_empty() {
        let plain: Vec<Step> = steps.iter().map(|(step, _)| step.clone()).collect();
        if let Some(cycle) = find_cycle(&plain, &index) {
            problems.push((
                start,
                format!(
                    "its steps wait for each other ({}): none of them could ever start",
                    cycle.join(" -> ")
                ),
            ));
        }
    }
    problems.sort_by_key(|(offset, _)| *offset);
    (steps, problems)
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

/// A step of a workflow as written, for the check of its job across files.
#[derive(Debug, Clone)]
pub(super) struct StepUse {
    workflow: String,
    step: String,
    job: String,
    source: Source,
}

/// Each step whose job is not a job declared in the directory (unknown, or a workflow), at the
/// step; a job declared but invalid reports its own problem instead.
pub(super) fn check_step_jobs(
    uses: &[StepUse],
    jobs: &[Job],
    declared: &[(String, Source)],
) -> Vec<Diagnostic> {
    let plain: std::collections::HashSet<&str> = jobs
        .iter()
        .filter(|job| job.workflow.is_none())
        .map(|job| job.name.as_str())
        .collect();
    let workflows: std::collections::HashSet<&str> =
        uses.iter().map(|used| used.workflow.as_str()).collect();
    let valid: std::collections::HashSet<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    uses.iter()
        .filter(|used| {
            // A step naming a job that did not read well waits for that job's own problem.
            let invalid_job = declared.iter().any(|(name, _)| *name == used.job)
                && !valid.contains(used.job.as_str())
                && !workflows.contains(used.job.as_str());
            !plain.contains(used.job.as_str()) && !invalid_job
        })
        .map(|used| {
            let what = if workflows.contains(used.job.as_str()) || valid.contains(used.job.as_str())
            {
                "a workflow: a step runs a job"
            } else {
                "not a job declared in this directory"
            };
            Diagnostic {
                path: used.source.path.clone(),
                position: Some((used.source.line, used.source.column)),
                job: None,
                field: Some(format!("workflows.{}.steps", used.workflow)),
                message: format!(
                    "step \"{}\" runs \"{}\", which is {what}",
                    used.step, used.job
                ),
            }
        })
        .collect()
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
    fn every_problem_of_the_steps_is_reported_at_its_step() {
        let dir = tempfile::tempdir().expect("temp dir");
        let workflow = "[workflows.w]\nsteps = [\n  { job = \"a\" },\n  \
                        { job = \"nope\", needs = [\"a\"] },\n  \
                        { job = \"b\", needs = [\"typo\"] },\n  { job = \"a\" },\n]\n";
        std::fs::write(dir.path().join("jobs.toml"), format!("{JOBS}{workflow}")).expect("write");
        let error = crate::schedule::load_dir(dir.path()).expect_err("invalid");
        let mut found: Vec<(Option<(usize, usize)>, &str)> = error
            .diagnostics
            .iter()
            .map(|diagnostic| (diagnostic.position, diagnostic.message.as_str()))
            .collect();
        found.sort();
        assert_eq!(
            found,
            [
                (
                    Some((10, 3)),
                    "step \"nope\" runs \"nope\", which is not a job declared in this directory"
                ),
                (
                    Some((11, 3)),
                    "step \"b\" needs \"typo\", which is not a step of this workflow"
                ),
                (
                    Some((12, 3)),
                    "step \"a\" is named twice: give one of them name = \"...\""
                ),
            ]
        );
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
