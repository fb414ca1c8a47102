use super::*;

fn sized_plan(job: &str, first_fire_ms: i64, runs: usize, skipped: usize) -> JobPlan {
    JobPlan {
        job: job.to_owned(),
        from_cursor_ms: 0,
        cursor_ms: first_fire_ms,
        runs: (0..runs as i64)
            .map(|i| PlannedRun {
                run_id: cron_run_id(job, first_fire_ms + i),
                fire_ms: first_fire_ms + i,
                due_ms: first_fire_ms + i,
            })
            .collect(),
        skipped: (0..skipped)
            .map(|_| SkippedFire {
                run_id: cron_run_id(job, 0),
                reason: SkipReason::Missed,
            })
            .collect(),
    }
}

#[test]
fn a_tick_over_budget_keeps_missed_fires_then_the_soonest() {
    let names = |plans: &[(usize, JobPlan)]| {
        plans
            .iter()
            .map(|(_, plan)| plan.job.clone())
            .collect::<Vec<_>>()
    };
    let mut plans: Vec<(usize, JobPlan)> = vec![
        sized_plan("late", 9_000, 3, 0),
        sized_plan("soon", 1_000, 3, 0),
        sized_plan("missed", 5_000, 1, 2),
        sized_plan("middle", 4_000, 3, 0),
    ]
    .into_iter()
    .enumerate()
    .collect();
    let mut left = Vec::new();
    within_budget(&mut plans, 9, &mut left);
    assert_eq!(names(&plans), ["missed", "soon", "middle"]);
    assert_eq!(
        left,
        [0],
        "the job of the plan dropped is left for a later tick"
    );

    let mut under = vec![(0, sized_plan("a", 2, 1, 0)), (1, sized_plan("b", 1, 1, 0))];
    within_budget(&mut under, 2, &mut Vec::new());
    assert_eq!(names(&under), ["a", "b"], "within budget: untouched");

    let mut huge = vec![
        (0, sized_plan("big", 1, 50, 0)),
        (1, sized_plan("small", 2, 1, 0)),
    ];
    within_budget(&mut huge, 10, &mut Vec::new());
    assert_eq!(names(&huge), ["big"], "the soonest plan always goes");
}
use crate::schedule::parse_file;
use std::path::Path;

fn job(fields: &str) -> Job {
    let text = format!("[jobs.tick]\ncommand = \"true\"\n{fields}\n");
    parse_file(Path::new("test.toml"), &text)
        .expect("valid test job")
        .remove(0)
}

fn fires(plan: &JobPlan) -> Vec<i64> {
    plan.runs.iter().map(|run| run.fire_ms / 1000).collect()
}

fn skipped(plan: &JobPlan) -> Vec<(i64, &'static str)> {
    plan.skipped
        .iter()
        .map(|fire| {
            let ms: i64 = fire.run_id["tick@".len()..].parse().expect("a fire time");
            (ms / 1000, fire.reason.as_str())
        })
        .collect()
}

const EVERY_30S: &str = "schedule = \"*/30 * * * * *\"";

#[test]
fn a_new_job_plans_from_now_to_the_horizon() {
    let plan = plan_job(&job(EVERY_30S), None, 1_000_000, &PlannerConfig::default())
        .expect("fires within the horizon");
    assert_eq!(fires(&plan), [1_020, 1_050]);
    assert!(plan.skipped.is_empty());
    assert_eq!(plan.cursor_ms, 1_050_000);
    assert_eq!(plan.runs[0].run_id, "tick@1020000");
    assert_eq!(plan.runs[0].due_ms, 1_020_000);
}

#[test]
fn a_cursor_at_the_horizon_has_nothing_to_plan() {
    let config = PlannerConfig::default();
    assert_eq!(
        plan_job(&job(EVERY_30S), Some(1_050_000), 1_000_000, &config),
        None
    );
    let plan = plan_job(&job(EVERY_30S), Some(1_050_000), 1_020_000, &config)
        .expect("one more fire came within the horizon");
    assert_eq!(fires(&plan), [1_080]);
}

#[test]
fn disabled_and_on_demand_jobs_plan_nothing() {
    let config = PlannerConfig::default();
    assert_eq!(
        plan_job(
            &job(&format!("{EVERY_30S}\nenabled = false")),
            None,
            0,
            &config
        ),
        None
    );
    assert_eq!(plan_job(&job(""), None, 0, &config), None);
}

#[test]
fn missed_fires_follow_the_misfire_policy() {
    let config = PlannerConfig::default();
    // Cursor at 600 s, now 800 s: fires 630..=740 are missed (more than 60 s late), 770 and
    // 800 are late but within the threshold and run, 830 and 860 are ahead.
    let (cursor, now) = (Some(600_000), 800_000);
    let missed = [630, 660, 690, 720];
    let skip = plan_job(
        &job(&format!("{EVERY_30S}\nmisfire = \"skip\"")),
        cursor,
        now,
        &config,
    )
    .expect("a plan");
    assert_eq!(skipped(&skip), missed.map(|fire| (fire, "missed")));
    assert_eq!(fires(&skip), [750, 780, 810, 840]);

    let once = plan_job(&job(EVERY_30S), cursor, now, &config).expect("a plan");
    assert_eq!(
        skipped(&once),
        [(630, "missed"), (660, "missed"), (690, "missed")]
    );
    assert_eq!(fires(&once), [720, 750, 780, 810, 840]);

    let all = plan_job(
        &job(&format!("{EVERY_30S}\nmisfire = \"run-all\"")),
        cursor,
        now,
        &config,
    )
    .expect("a plan");
    assert!(all.skipped.is_empty());
    assert_eq!(fires(&all), [630, 660, 690, 720, 750, 780, 810, 840]);
    assert_eq!(all.cursor_ms, 840_000);
}

#[test]
fn fires_past_the_starting_deadline_are_skipped_whatever_the_policy() {
    let config = PlannerConfig::default();
    let job = job(&format!(
        "{EVERY_30S}\nmisfire = \"run-all\"\nstarting_deadline = \"100s\""
    ));
    let plan = plan_job(&job, Some(600_000), 800_000, &config).expect("a plan");
    assert_eq!(
        skipped(&plan),
        [(630, "deadline"), (660, "deadline"), (690, "deadline")]
    );
    assert_eq!(fires(&plan), [720, 750, 780, 810, 840]);
}

#[test]
fn a_long_outage_is_worked_off_in_bounded_ticks() {
    let config = PlannerConfig::default();
    let job = job("schedule = \"* * * * * *\"\nmisfire = \"skip\"");
    // One day behind with a job every second.
    let now = 86_400_000 + 1_000_000;
    let first = plan_job(&job, Some(1_000_000), now, &config).expect("a plan");
    assert_eq!(first.skipped.len(), MAX_MISSED_SCAN);
    assert!(
        first.runs.is_empty(),
        "nothing is planned until the backlog is decided"
    );
    assert_eq!(first.cursor_ms, 1_000_000 + MAX_MISSED_SCAN as i64 * 1000);

    let mut cursor = first.cursor_ms;
    let mut ticks = 1;
    let last = loop {
        let plan = plan_job(&job, Some(cursor), now, &config).expect("a plan");
        ticks += 1;
        cursor = plan.cursor_ms;
        if !plan.runs.is_empty() {
            break plan;
        }
    };
    assert_eq!(ticks, 9);
    assert_eq!(last.runs.len(), config.max_runs_per_job);
    assert_eq!(last.runs[0].fire_ms, now - 60_000 + 1_000);
}

#[test]
fn run_once_runs_only_the_latest_fire_missed_in_a_long_outage() {
    let config = PlannerConfig::default();
    let job = job("schedule = \"* * * * * *\"");
    let now = 86_400_000 + 1_000_000;
    let mut cursor = 1_000_000;
    let mut skipped_fires = 0;
    let last = loop {
        let plan = plan_job(&job, Some(cursor), now, &config).expect("a plan");
        skipped_fires += plan.skipped.len();
        cursor = plan.cursor_ms;
        if !plan.runs.is_empty() {
            break plan;
        }
    };
    assert_eq!(
        last.runs[0].fire_ms,
        now - 60_000,
        "the latest missed fire runs"
    );
    assert_eq!(last.runs[1].fire_ms, now - 59_000);
    assert_eq!(skipped_fires, 86_340 - 1);
}

#[test]
fn run_all_catch_up_is_bounded_per_tick() {
    let config = PlannerConfig::default();
    let job = job("schedule = \"* * * * * *\"\nmisfire = \"run-all\"");
    let plan = plan_job(&job, Some(0), 1_000_000, &config).expect("a plan");
    assert_eq!(plan.runs.len(), config.max_runs_per_job);
    assert_eq!(plan.cursor_ms, 120_000);
    assert_eq!(plan.runs[0].fire_ms, 1_000);
}

#[test]
fn jitter_is_deterministic_and_below_its_bound() {
    let job = job(&format!("{EVERY_30S}\njitter = \"10s\""));
    let config = PlannerConfig::default();
    let first = plan_job(&job, None, 0, &config).expect("a plan");
    let again = plan_job(&job, None, 0, &config).expect("a plan");
    assert_eq!(first, again);
    let delays: Vec<i64> = first
        .runs
        .iter()
        .map(|run| run.due_ms - run.fire_ms)
        .collect();
    assert!(
        delays.iter().all(|delay| (0..10_000).contains(delay)),
        "{delays:?}"
    );
    assert_ne!(delays[0], delays[1], "different fires get different delays");
}
