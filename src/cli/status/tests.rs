//! Unit tests of what `status` and `jobs` make of an overview.

use super::definitions::Parsed;
use super::published::{Declarers, Published};
use super::*;
use crate::store::{Event, ReplicaInfo, RunCounts, published_hash};

fn replica(id: &str, alive: bool, jobs: Option<&[(&str, &str)]>) -> ReplicaInfo {
    ReplicaInfo {
        id: id.to_owned(),
        heartbeat_ms: 0,
        info: if alive {
            HashMap::from([("host".to_owned(), "h".to_owned())])
        } else {
            HashMap::new()
        },
        jobs: jobs.map(|jobs| {
            jobs.iter()
                .map(|(job, hash)| ((*job).to_owned(), (*hash).to_owned()))
                .collect()
        }),
        stopped_ms: None,
    }
}

/// A namespace of `replicas` and nothing else, at time 0.
pub(super) fn overview_of(replicas: Vec<ReplicaInfo>) -> Overview {
    Overview {
        now_ms: 0,
        leader: None,
        counts: RunCounts {
            due: 0,
            active: 0,
            dead: 0,
            ready: Vec::new(),
        },
        paused: Vec::new(),
        held_for: None,
        replicas,
        definitions: HashMap::new(),
        definition_hashes: HashMap::new(),
        definition_hashes_damaged: false,
        damaged_names: Vec::new(),
        running: Vec::new(),
        undeclared: Vec::new(),
    }
}

#[test]
fn drift_is_another_definition_and_a_missing_job_is_not_drift() {
    // Not in id order, as heartbeats would order them.
    let overview = overview_of(vec![
        replica("d", true, Some(&[("nightly", "h2")])),
        replica("c", true, Some(&[("other", "h9")])),
        replica("a", true, Some(&[("nightly", "h1")])),
        replica("b", true, Some(&[("nightly", "h3")])),
        replica("e", true, None),
        replica("f", false, Some(&[("nightly", "h2")])),
        replica("g", true, Some(&[])),
    ]);
    let job = Published::parse(
        "nightly",
        r#"{"schedule": "0 3 * * *"}"#,
        Some(&"h1".to_owned()),
    );
    let declarers = Declarers::of(&overview, &job);
    assert_eq!(
        declarers,
        Declarers {
            same: vec!["a".to_owned()],
            differs: vec!["b".to_owned(), "d".to_owned()],
            undeclared: vec!["c".to_owned(), "g".to_owned()],
            excluded: Vec::new(),
        }
    );
    assert_eq!(
        declarers.warning(),
        "DRIFT: differs on b, d; not declared by c, g"
    );
    let everywhere = Declarers {
        same: vec!["a".to_owned()],
        ..Declarers::default()
    };
    assert_eq!(everywhere.warning(), "");
}

#[test]
fn a_replica_whose_labels_the_where_does_not_match_is_no_warning() {
    let labelled = |id: &str, labels: &str| {
        let mut replica = replica(id, true, Some(&[]));
        replica.info.insert("labels".to_owned(), labels.to_owned());
        replica
            .info
            .insert("queues".to_owned(), "default".to_owned());
        replica
    };
    let overview = overview_of(vec![
        labelled("db1", "host=db1,replica=db1,role=db"),
        labelled("web2", "host=web2,replica=web2,role=web"),
    ]);
    let job = Published::parse(
        "rotate",
        r#"{"schedule": "@daily", "timezone": "UTC", "enabled": true, "where": ["queue=default", "role=web"], "on": "every"}"#,
        Some(&"h1".to_owned()),
    );
    let declarers = Declarers::of(&overview, &job);
    // Both leave it undeclared; only web2, which matches, is a surprise.
    assert_eq!(declarers.undeclared, ["db1", "web2"]);
    assert_eq!(declarers.warning(), "not declared by web2");
    assert_eq!(
        job.placement().as_deref(),
        Some("runs each fire on every replica with queue=default, role=web")
    );
}

#[test]
fn a_damaged_definition_is_said_to_be_damaged_not_shown_with_made_up_values() {
    let damaged = Published::parse("x", "{not json", None);
    assert!(damaged.summary().is_none());
    assert_eq!((damaged.timezone(), damaged.enabled()), (None, None));
    assert!(damaged.next_fires(0, 2).is_empty());
    let good = Published::parse(
        "x",
        r#"{"schedule":"0 3 * * *","timezone":"Europe/Paris","enabled":true,"retries":3}"#,
        None,
    );
    assert_eq!(good.timezone(), Some("Europe/Paris"));
    assert_eq!(good.next_fires(0, 2).len(), 2);
}

#[test]
fn the_recent_events_of_a_job_are_its_own_newest_first_and_its_last_outcome_skips_actions() {
    let event = |at_ms: i64, fields: &[(&str, &str)]| Event {
        at_ms,
        fields: fields
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect(),
    };
    let events = RecentEvents::new(vec![
        event(5, &[("job", "a"), ("action", "pause"), ("actor", "cli")]),
        event(4, &[("job", "b"), ("run", "b1"), ("state", "dead")]),
        event(3, &[("job", "a"), ("run", "a2"), ("state", "retrying")]),
        event(2, &[("run", "orphan"), ("state", "succeeded")]),
        event(1, &[("job", "a"), ("run", "a1"), ("state", "succeeded")]),
    ]);
    let at = |job: &str| events.of(job).map(|event| event.at_ms).collect::<Vec<_>>();
    assert_eq!(
        (at("a"), at("b"), at("c")),
        (vec![5, 3, 1], vec![4], vec![])
    );
    assert_eq!(events.last_outcome("a"), Some(("retrying", 3)));
    assert_eq!(events.last_outcome("c"), None);
    assert_eq!(events.all().len(), 5);
}

/// A namespace that publishes `jobs` (name, content hash, definition) and nothing else.
fn publishing(jobs: &[(String, String, &str)]) -> Overview {
    let mut overview = overview_of(Vec::new());
    for (job, hash, json) in jobs {
        overview.definitions.insert(job.clone(), (*json).to_owned());
        overview.definition_hashes.insert(job.clone(), hash.clone());
    }
    overview
}

/// `jobs` (name, definition) published each under its own hash.
fn published_as_is(jobs: &[(String, &str)]) -> Overview {
    let hashed: Vec<(String, String, &str)> = jobs
        .iter()
        .map(|(job, json)| (job.clone(), published_hash(json), *json))
        .collect();
    publishing(&hashed)
}

const AT_THREE: &str = r#"{"schedule": "0 3 * * *", "timezone": "UTC", "enabled": true}"#;

#[test]
fn a_definition_is_parsed_once_per_hash_and_a_new_hash_anew() {
    let definitions = Definitions::default();
    let h1 = published_hash(AT_THREE);
    definitions.learn(&published_as_is(&[("nightly".into(), AT_THREE)]));
    assert_eq!(
        definitions.known(&h1),
        Some((AT_THREE.to_owned(), None)),
        "what an overview takes instead of reading the definition"
    );
    // A hash names one definition: what comes with it again is not parsed.
    let kept = definitions.parsed(Some(&h1), "{not json");
    assert_eq!(
        kept.summary
            .as_ref()
            .and_then(|summary| summary.schedule.as_deref()),
        Some("0 3 * * *")
    );
    let moved = r#"{"schedule": "0 4 * * *", "timezone": "UTC", "enabled": true, "queue": "slow"}"#;
    let h2 = published_hash(moved);
    definitions.learn(&published_as_is(&[("nightly".into(), moved)]));
    assert_eq!(
        definitions.known(&h2),
        Some((moved.to_owned(), Some("slow".to_owned())))
    );
    let anew = definitions.parsed(Some(&h2), moved);
    assert_eq!(
        anew.summary
            .as_ref()
            .and_then(|summary| summary.schedule.as_deref()),
        Some("0 4 * * *")
    );
    assert_eq!(definitions.known("h3"), None);
}

#[test]
fn a_definition_read_under_a_hash_not_its_own_is_kept_by_none() {
    let definitions = Definitions::default();
    // Edited by hand: the definition, or its hash, is not what the leader published.
    let edited = r#"{"schedule": "0 5 * * *", "timezone": "UTC", "enabled": true}"#;
    let published = published_hash(AT_THREE);
    definitions.learn(&publishing(&[(
        "nightly".into(),
        published.clone(),
        edited,
    )]));
    assert_eq!(definitions.known(&published), None);
    definitions.learn(&publishing(&[("nightly".into(), "h9".into(), AT_THREE)]));
    assert_eq!(definitions.known("h9"), None);
    assert_eq!(definitions.len(), 0);
}

#[test]
fn definitions_kept_are_at_most_twice_the_published_jobs() {
    let definitions = Definitions::default();
    for deploy in 0..10 {
        let texts: Vec<String> = (0..3)
            .map(|job| {
                format!(
                    r#"{{"schedule": "{job} 3 * * *", "timezone": "UTC", "enabled": true, "deploy": {deploy}}}"#
                )
            })
            .collect();
        let jobs: Vec<(String, &str)> = texts
            .iter()
            .enumerate()
            .map(|(job, json)| (format!("job{job}"), json.as_str()))
            .collect();
        definitions.learn(&published_as_is(&jobs));
        assert!(
            definitions.len() <= 6,
            "deploy {deploy}: {} kept for 3 jobs",
            definitions.len()
        );
        for (_, json) in &jobs {
            assert!(
                definitions.known(&published_hash(json)).is_some(),
                "{json} is published"
            );
        }
    }
}

#[test]
fn a_kept_next_fire_is_the_one_found_anew() {
    let json = r#"{"schedule": "*/5 * * * *", "timezone": "Europe/Berlin", "enabled": true}"#;
    let job = Published::parse("five", json, None);
    let kept = Parsed::new(json);
    // Every 70 s for a while: some reads fall before a fire, some after it.
    for now_ms in (0..20).map(|step| 1_767_225_600_000 + step * 70_000) {
        assert_eq!(kept.next_fire(now_ms), job.next_fires(now_ms, 1).pop());
    }
    let disabled = Parsed::new(r#"{"schedule": "0 3 * * *", "timezone": "UTC", "enabled": false}"#);
    assert_eq!(disabled.next_fire(0), None);
}
