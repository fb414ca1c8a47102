//! `/api/v1/runs` pages as a keyset against a real Redis and a real `redcron web`: each run
//! once and in order while runs move between pages, a cursor outliving its run, forged cursors
//! refused, a filter's scan bounded, a time window kept by the cursor, ended runs paged from
//! the events stream, and a page's cost independent of how many runs there are.

use redis::Commands;
use serde_json::Value;

use crate::util::redis_server::RedisServer;
use crate::util::web::WebProcess;
use crate::util::{command_calls, keys};

/// When the seeded runs are due: far enough ahead that nothing promotes them (no replica runs).
const DUE_MS: i64 = 4_000_000_000_000;

/// A Redis with `count` planned fires of job `job` in the due set, due by fives at each of a few
/// instants (ties sort by id), and a `redcron web` on it.
fn seeded(fires: &[(&str, usize)]) -> (RedisServer, tempfile::TempDir, WebProcess) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut redis = server.connection();
    for (job, count) in fires {
        for chunk in (0..*count).collect::<Vec<_>>().chunks(10_000) {
            let mut pipe = redis::pipe();
            for n in chunk {
                let due_ms = DUE_MS + (*n as i64 / 5) * 1000;
                pipe.zadd(keys().due(), format!("{job}@{n:07}"), due_ms)
                    .ignore();
            }
            let () = pipe.query(&mut redis).expect("ZADD");
        }
    }
    let web = WebProcess::start(&server.url(), dir.path(), &[]);
    (server, dir, web)
}

/// One page of `path`: its run ids, and its cursor.
#[track_caller]
fn page(web: &WebProcess, path: &str) -> (Vec<String>, Option<String>, Value) {
    let answer = web.get(path);
    assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    let document = answer.json();
    let ids = document["runs"]
        .as_array()
        .expect("a page of runs")
        .iter()
        .map(|run| run["id"].as_str().expect("an id").to_owned())
        .collect();
    let cursor = document["next_cursor"].as_str().map(str::to_owned);
    (ids, cursor, document)
}

#[test]
fn paging_lists_each_run_once_in_order_while_runs_end_and_come() {
    let (server, _dir, web) = seeded(&[("tick", 300)]);
    let mut redis = server.connection();
    let mut expected: Vec<String> = (0..300).map(|n| format!("tick@{n:07}")).collect();
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut added = 0;
    loop {
        let path = match &cursor {
            None => "/api/v1/runs?state=due&limit=7".to_owned(),
            Some(cursor) => format!("/api/v1/runs?state=due&limit=7&cursor={cursor}"),
        };
        let (ids, next, _) = page(&web, &path);
        assert!(ids.len() <= 7, "{ids:?}");
        seen.extend(ids.iter().cloned());
        let Some(next) = next else { break };
        let last = ids.last().expect("a page with a cursor has runs").clone();
        // Between pages: the cursor's own run ends (it leaves the due set), a run already
        // listed ends, a run comes due before the cursor (the listing has passed it), and one
        // comes due at the end (the listing reaches it).
        let listed_before = seen[seen.len() / 2].clone();
        let () = redis
            .zrem(keys().due(), &[&last, &listed_before])
            .expect("ZREM");
        let () = redis
            .zadd(keys().due(), format!("early@{added:07}"), DUE_MS - 1)
            .expect("ZADD");
        let late = format!("late@{added:07}");
        let () = redis
            .zadd(keys().due(), &late, DUE_MS + 10_000_000)
            .expect("ZADD");
        expected.push(late);
        added += 1;
        cursor = Some(next);
    }
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "a run listed twice: {seen:?}");
    // The seeded runs in due order (by id among the same instant), then the late ones that came
    // before the listing reached them.
    let late_listed = seen.iter().filter(|id| id.starts_with("late@")).count();
    assert!(late_listed > 0, "no run that came at the end was listed");
    expected.retain(|id| !id.starts_with("late@") || seen.contains(id));
    assert_eq!(seen, expected[..seen.len()].to_vec());
    assert_eq!(seen.len(), 300 + late_listed);
    assert!(!seen.iter().any(|id| id.starts_with("early@")), "{seen:?}");
}

#[test]
fn a_run_that_moves_to_a_state_already_passed_is_not_listed_again() {
    let (server, _dir, web) = seeded(&[("tick", 20)]);
    let mut redis = server.connection();
    let (first, cursor, _) = page(&web, "/api/v1/runs?limit=5");
    assert_eq!(first[0], "tick@0000000", "{first:?}");
    let cursor = cursor.expect("more pages");
    // The first listed run is claimed: it leaves the due set for the active set, which the
    // listing (leases first) has passed; a record says it is active.
    let () = redis.zrem(keys().due(), &first[0]).expect("ZREM");
    let () = redis
        .zadd(keys().active(), &first[0], DUE_MS)
        .expect("ZADD");
    let () = redis
        .hset_multiple(
            keys().run(&first[0]),
            &[("job", "tick"), ("state", "active"), ("kind", "cron")],
        )
        .expect("HSET");
    let mut seen = first.clone();
    let mut next = Some(cursor);
    while let Some(cursor) = next {
        let (ids, cursor, _) = page(&web, &format!("/api/v1/runs?limit=5&cursor={cursor}"));
        seen.extend(ids);
        next = cursor;
    }
    assert_eq!(seen.len(), 20, "{seen:?}");
    assert_eq!(seen.iter().filter(|id| **id == first[0]).count(), 1);
    // A new listing shows it where it is now: first, as leases come first.
    let (again, _, _) = page(&web, "/api/v1/runs?limit=5");
    assert_eq!(again[0], first[0]);
    let (_, _, document) = page(&web, "/api/v1/runs?limit=5");
    assert_eq!(document["runs"][0]["state"], "active", "{document}");
}

#[test]
fn a_forged_cursor_is_refused_and_an_exact_id_is_read_directly() {
    let (_server, _dir, web) = seeded(&[("tick", 3)]);
    for forged in ["tick@0000001", "d.soon.7469636b", "a.zz", "r.0.0.61"] {
        let answer = web.get(&format!("/api/v1/runs?cursor={forged}"));
        assert_eq!(answer.status, 400, "{forged}: {}", answer.body);
        assert_eq!(answer.code(), "bad-cursor", "{}", answer.body);
    }
    let (ids, cursor, document) = page(&web, "/api/v1/runs?id=tick@0000002");
    assert_eq!(ids, ["tick@0000002"], "{document}");
    assert_eq!(cursor, None);
    assert_eq!(document["runs"][0]["state"], "scheduled", "{document}");
    let (ids, _, _) = page(&web, "/api/v1/runs?id=tick@0000009");
    assert!(ids.is_empty(), "{ids:?}");
}

#[test]
fn a_filter_no_index_serves_reads_a_bounded_page_and_says_where_to_go_on() {
    // More runs of another job ahead of the one asked for than a page reads.
    let (server, _dir, web) = seeded(&[("other", 12_000)]);
    let mut redis = server.connection();
    let () = redis
        .zadd(keys().due(), "wanted@1", DUE_MS + 10_000_000)
        .expect("ZADD");
    let () = redis
        .hset(keys().defs(), "wanted", r#"{"queue": "default"}"#)
        .expect("HSET");
    let (ids, cursor, document) = page(&web, "/api/v1/runs?job=wanted&limit=5");
    assert!(ids.is_empty(), "{document}");
    assert_eq!(document["scan_limited"], true, "{document}");
    let cursor = cursor.expect("a cursor to go on from");
    let (ids, cursor, document) = page(
        &web,
        &format!("/api/v1/runs?job=wanted&limit=5&cursor={cursor}"),
    );
    assert_eq!(ids, ["wanted@1"], "{document}");
    assert_eq!(document["scan_limited"], false, "{document}");
    assert_eq!(cursor, None, "{document}");
}

/// How many commands Redis has run since its statistics were reset (those of scripts too).
fn commands_run(redis: &mut redis::Connection) -> u64 {
    command_calls(redis).values().sum()
}

#[test]
fn a_page_deep_in_costs_the_same_commands_with_a_hundred_thousand_runs() {
    let (server, _dir, web) = seeded(&[("tick", 100_000)]);
    let mut redis = server.connection();
    let (_, cursor, _) = page(&web, "/api/v1/runs?state=due&limit=1000");
    let mut cursor = cursor.expect("more pages");
    for _ in 0..50 {
        let (_, next, _) = page(
            &web,
            &format!("/api/v1/runs?state=due&limit=1000&cursor={cursor}"),
        );
        cursor = next.expect("more pages");
    }
    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut redis)
        .expect("CONFIG RESETSTAT");
    let (ids, _, _) = page(
        &web,
        &format!("/api/v1/runs?state=due&limit=50&cursor={cursor}"),
    );
    assert_eq!(ids.first().map(String::as_str), Some("tick@0051000"));
    let commands = commands_run(&mut redis);
    // A record read per run shown (and the one after), the script's halving over the runs of
    // one instant, and a few reads of the listing's own: never a walk over the set.
    assert!(
        commands <= 100,
        "a page of 50 runs 51,000 deep into 100,000 cost {commands} commands"
    );
}

#[test]
fn ready_runs_are_paged_once_each_while_claims_take_them_from_the_head() {
    let (server, _dir, web) = seeded(&[]);
    let mut redis = server.connection();
    let list = keys().ready("default", redcron::schedule::Priority::Normal);
    let ids: Vec<String> = (0..30).map(|n| format!("ad-hoc-{n:02}")).collect();
    for id in &ids {
        let () = redis
            .hset_multiple(
                keys().run(id),
                &[("job", "tick"), ("state", "ready"), ("kind", "adhoc")],
            )
            .expect("HSET");
        let () = redis.rpush(&list, id).expect("RPUSH");
    }
    let mut seen: Vec<String> = Vec::new();
    let mut claimed: Vec<String> = Vec::new();
    let mut path = "/api/v1/runs?state=ready&limit=4".to_owned();
    for pages in 0.. {
        let (page_ids, next, _) = page(&web, &path);
        seen.extend(page_ids);
        let Some(next) = next else { break };
        // Claims take runs from the head between pages: one listed, or five, the cursor's own
        // among them (the next page then starts at the head).
        let take = if pages % 2 == 0 { 5 } else { 1 };
        let taken: Vec<String> = redis
            .lpop(&list, std::num::NonZeroUsize::new(take))
            .expect("LPOP");
        claimed.extend(taken);
        path = format!("/api/v1/runs?state=ready&limit=4&cursor={next}");
    }
    let mut unique = seen.clone();
    unique.dedup();
    assert_eq!(unique, seen, "a run listed twice: {seen:?}");
    // In the order claims take them, and every run that was never claimed is listed.
    let expected: Vec<&String> = ids
        .iter()
        .filter(|id| seen.contains(id) || !claimed.contains(id))
        .collect();
    assert_eq!(seen.iter().collect::<Vec<_>>(), expected);
    assert!(claimed.iter().any(|id| seen.contains(id)), "{claimed:?}");
}

/// When the seeded outcomes were recorded: the `n`th a millisecond after this.
const ENDED_MS: i64 = 1_700_000_000_000;

/// A Redis whose events stream holds `count` outcomes of job `tick` (`tick@<n>`, recorded at
/// [`ENDED_MS`] + n ms), every tenth dead and the others successful, their records expired as
/// a retention does; and a `redcron web` on it.
fn with_outcomes(count: usize) -> (RedisServer, tempfile::TempDir, WebProcess) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut redis = server.connection();
    for chunk in (0..count).collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        for n in chunk {
            let state = if n % 10 == 0 { "dead" } else { "succeeded" };
            pipe.cmd("XADD")
                .arg(keys().events())
                .arg(format!("{}-0", ENDED_MS + *n as i64))
                .arg(&[
                    "run",
                    &format!("tick@{n:07}"),
                    "state",
                    state,
                    "job",
                    "tick",
                ])
                .ignore();
        }
        let () = pipe.query(&mut redis).expect("XADD");
    }
    let web = WebProcess::start(&server.url(), dir.path(), &[]);
    (server, dir, web)
}

/// `ms` as RFC 3339 in UTC, as a query's `since` or `until` gives it.
fn instant(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("in range")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[test]
fn ended_runs_are_paged_from_the_stream_once_each_newest_first_in_their_window() {
    let (server, _dir, web) = with_outcomes(3_000);
    let mut redis = server.connection();
    let window = format!(
        "since={}&until={}",
        instant(ENDED_MS + 1_000),
        instant(ENDED_MS + 1_999)
    );
    let mut path = format!("/api/v1/runs?state=failed&limit=7&{window}");
    let mut seen = Vec::new();
    let mut added = 0;
    loop {
        let (ids, next, document) = page(&web, &path);
        assert!(ids.len() <= 7, "{ids:?}");
        for run in document["runs"].as_array().expect("runs") {
            assert_eq!(run["state"], "dead", "{run}");
            let n: i64 = run["id"].as_str().expect("an id")[5..]
                .parse()
                .expect("a number");
            assert_eq!(run["finished_ms"], ENDED_MS + n, "{run}");
        }
        seen.extend(ids);
        let Some(next) = next else { break };
        // Outcomes keep coming between pages, newer than any listed.
        let () = redis::cmd("XADD")
            .arg(keys().events())
            .arg("*")
            .arg(&[
                "run",
                &format!("new@{added}"),
                "state",
                "dead",
                "job",
                "tick",
            ])
            .query(&mut redis)
            .expect("XADD");
        added += 1;
        // The cursor keeps the window: the next pages are asked without it.
        path = format!("/api/v1/runs?state=failed&limit=7&cursor={next}");
    }
    let expected: Vec<String> = (1_000..2_000)
        .rev()
        .filter(|n| n % 10 == 0)
        .map(|n| format!("tick@{n:07}"))
        .collect();
    assert_eq!(seen, expected);

    // Succeeded, with no window: the newest first, the new dead ones passed over.
    let (ids, _, _) = page(&web, "/api/v1/runs?state=succeeded&limit=3");
    assert_eq!(ids, ["tick@0002999", "tick@0002998", "tick@0002997"]);
    for (query, code) in [
        ("state=finished&since=yesterday", "bad-time"),
        (
            &format!(
                "state=due&since={}&until={}",
                instant(ENDED_MS + 1),
                instant(ENDED_MS)
            ),
            "bad-time",
        ),
        ("state=done", "bad-query"),
    ] {
        let answer = web.get(&format!("/api/v1/runs?{query}"));
        assert_eq!(
            (answer.status, answer.code()),
            (400, code.to_owned()),
            "{query}"
        );
    }
}

#[test]
fn a_time_window_keeps_the_due_runs_within_it_on_every_page() {
    let (_server, _dir, web) = seeded(&[("tick", 300)]);
    // Due by fives a second from DUE_MS: the window holds the fires 50 to 99.
    let mut path = format!(
        "/api/v1/runs?limit=7&since={}&until={}",
        instant(DUE_MS + 10_000),
        instant(DUE_MS + 19_999)
    );
    let mut seen = Vec::new();
    loop {
        let (ids, next, _) = page(&web, &path);
        seen.extend(ids);
        let Some(next) = next else { break };
        // A window given again with a cursor is not read: the cursor's stands.
        path = format!("/api/v1/runs?limit=7&since=1h&cursor={next}");
    }
    let expected: Vec<String> = (50..100).map(|n| format!("tick@{n:07}")).collect();
    assert_eq!(seen, expected);
}

#[test]
fn a_page_of_ended_runs_a_million_deep_costs_the_commands_of_one_at_the_head() {
    let (server, _dir, web) = with_outcomes(1_000_000);
    let mut redis = server.connection();
    let successes = |until: i64| -> Vec<String> {
        (0..=until)
            .rev()
            .filter(|n| n % 10 != 0)
            .map(|n| format!("tick@{n:07}"))
            .collect()
    };
    let mut costs = Vec::new();
    // At the head, and 990,000 outcomes deep: a page of 50 after a page of 1,000.
    for until in [999_999, 10_000] {
        let path = format!(
            "/api/v1/runs?state=succeeded&limit=1000&until={}",
            instant(ENDED_MS + until)
        );
        let (ids, cursor, _) = page(&web, &path);
        let expected = successes(until);
        assert_eq!(ids, expected[..1_000]);
        let cursor = cursor.expect("more pages");
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut redis)
            .expect("CONFIG RESETSTAT");
        let (ids, _, _) = page(
            &web,
            &format!("/api/v1/runs?state=succeeded&limit=50&cursor={cursor}"),
        );
        assert_eq!(ids, expected[1_000..1_050]);
        costs.push(commands_run(&mut redis));
    }
    // One read of the stream, a record read per run shown (and the one after), and the clock:
    // never a walk over the stream.
    assert!(
        costs.iter().all(|cost| *cost <= 60) && costs[0] == costs[1],
        "a page of 50 ended runs cost {costs:?} commands at the head and 990,000 deep"
    );
}
