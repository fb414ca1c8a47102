//! Unit tests of what `status` and `jobs` make of an overview.

use super::*;
use crate::store::{ReplicaInfo, RunCounts};

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

#[test]
fn durations_read_in_the_units_that_matter() {
    for (ms, text) in [
        (-5, "0 s"),
        (999, "0 s"),
        (45_000, "45 s"),
        (120_400, "2 min"),
        (3_599_999, "59 min"),
        (3_600_000, "1 h"),
        (11_100_000, "3 h 5 min"),
        (86_400_000, "1 d"),
        (187_200_000, "2 d 4 h"),
    ] {
        assert_eq!(elapsed(ms), text, "{ms} ms");
    }
}

#[test]
fn a_time_of_today_is_shown_without_its_date() {
    let now = DateTime::parse_from_rfc3339("2026-03-08T12:00:00Z")
        .expect("time")
        .timestamp_millis();
    let local = |ms: i64| {
        DateTime::from_timestamp_millis(ms)
            .expect("in range")
            .with_timezone(&Local)
    };
    let earlier = now - 90_000;
    let expected = if local(earlier).date_naive() == local(now).date_naive() {
        local(earlier).format("%H:%M:%S").to_string()
    } else {
        local(earlier).format("%Y-%m-%d %H:%M:%S").to_string()
    };
    assert_eq!(local_time(now, earlier), expected);
    let long_ago = now - 3 * 86_400_000;
    assert_eq!(
        local_time(now, long_ago),
        local(long_ago).format("%Y-%m-%d %H:%M:%S").to_string()
    );
}

#[test]
fn drift_is_another_definition_and_a_missing_job_is_not_drift() {
    let overview = Overview {
        now_ms: 0,
        leader: None,
        counts: RunCounts {
            due: 0,
            active: 0,
            dead: 0,
            ready: Vec::new(),
        },
        paused: Vec::new(),
        // Not in id order, as heartbeats would order them.
        replicas: vec![
            replica("d", true, Some(&[("nightly", "h2")])),
            replica("c", true, Some(&[("other", "h9")])),
            replica("a", true, Some(&[("nightly", "h1")])),
            replica("b", true, Some(&[("nightly", "h3")])),
            replica("e", true, None),
            replica("f", false, Some(&[("nightly", "h2")])),
            replica("g", true, Some(&[])),
        ],
        definitions: HashMap::new(),
        definition_hashes: HashMap::new(),
        running: Vec::new(),
        undeclared: Vec::new(),
    };
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
fn a_damaged_definition_is_said_to_be_damaged_not_shown_with_made_up_values() {
    let damaged = Published::parse("x", "{not json", None);
    assert!(damaged.summary.is_none());
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
