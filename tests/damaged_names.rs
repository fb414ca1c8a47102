//! Names that are not UTF-8 in the indexes of job, replica and queue names (written by
//! something else, or damaged): every reader leaves them out and names them, the console and
//! the API answer, scheduling goes on, and the reapers remove them.

use std::time::Duration;

use redis::Commands;

use crate::util::scenario::Scenario;
use crate::util::schemas::Schemas;
use crate::util::web::WebProcess;
use crate::util::{cli, keys, one_document, wait_until};

/// Writes a damaged name in every index of names, and returns those `status` names: the ones
/// in the indexes an overview reads (the planner's cursors, the damaged definitions and the
/// queues with ready runs are read by the components alone, which leave them out as well).
fn damage(redis: &mut redis::Connection, now_ms: i64) -> Vec<&'static str> {
    let keys = keys();
    let bad = b"bad\xffkey".as_slice();
    let () = redis
        .hset(keys.defs(), b"bin\xffary".as_slice(), "{}")
        .expect("HSET defs");
    let () = redis
        .hset(keys.def_hashes(), bad, "abc")
        .expect("HSET def-hashes");
    let () = redis.hset(keys.cursor(), bad, "1").expect("HSET cursor");
    let () = redis
        .zadd(keys.replicas(), bad, now_ms)
        .expect("ZADD replicas");
    let () = redis
        .zadd(keys.stopped_replicas(), bad, now_ms)
        .expect("ZADD stopped");
    let () = redis
        .zadd(keys.undeclared_jobs(), bad, now_ms)
        .expect("ZADD undeclared");
    let () = redis.sadd(keys.paused(), bad).expect("SADD paused");
    let () = redis
        .sadd(keys.damaged_definitions(), bad)
        .expect("SADD damaged-defs");
    let () = redis
        .sadd(keys.ready_queues(), bad)
        .expect("SADD ready-queues");
    // An id, not a name, that no reader lists: the reapers' settling of workflows drops it.
    let () = redis
        .zadd(keys.workflows_running(), bad, now_ms)
        .expect("ZADD wf");
    vec![
        "defs: bin\\xffary",
        "def-hashes: bad\\xffkey",
        "replicas: bad\\xffkey",
        "stopped-replicas: bad\\xffkey",
        "paused: bad\\xffkey",
        "undeclared-jobs: bad\\xffkey",
    ]
}

/// Whether any index still holds a name that is not UTF-8.
fn any_damaged_left(redis: &mut redis::Connection) -> bool {
    let keys = keys();
    let hashes = [keys.defs(), keys.def_hashes(), keys.cursor()];
    let sets = [
        keys.paused(),
        keys.damaged_definitions(),
        keys.ready_queues(),
    ];
    let sorted = [
        keys.replicas(),
        keys.stopped_replicas(),
        keys.undeclared_jobs(),
        keys.workflows_running(),
    ];
    let mut names: Vec<Vec<u8>> = Vec::new();
    for key in hashes {
        names.extend(redis.hkeys::<_, Vec<Vec<u8>>>(key).expect("HKEYS"));
    }
    for key in sets {
        names.extend(redis.smembers::<_, Vec<Vec<u8>>>(key).expect("SMEMBERS"));
    }
    for key in sorted {
        names.extend(redis.zrange::<_, Vec<Vec<u8>>>(key, 0, -1).expect("ZRANGE"));
    }
    names.iter().any(|name| std::str::from_utf8(name).is_err())
}

/// One name that is not UTF-8 in each index of names fails no reader (`status`, `jobs`,
/// `runs list`, every console page and API route the hostile check found failing answer, and
/// name the damaged ones), stops no scheduling, and the reapers remove them.
#[test]
fn names_that_are_not_utf8_fail_no_reader_stop_no_job_and_are_removed() {
    let scenario = Scenario::new();
    scenario.write_jobs(&scenario.every_second_job());
    let (server, work) = (&scenario.server, scenario.dir.path());
    let mut redis = server.connection();
    let named = damage(&mut redis, scenario.redis_now_ms());

    let status = one_document(&cli(server, work, &["status", "--json"]).success());
    Schemas::of_the_docs().assert_matches("status.json", &status);
    let listed: Vec<&str> = status["damaged_names"]
        .as_array()
        .map(|names| names.iter().filter_map(|name| name.as_str()).collect())
        .unwrap_or_default();
    let mut expected = named.clone();
    expected.sort_unstable();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, expected, "{status}");
    let text = cli(server, work, &["status"]).stdout;
    assert!(
        text.contains("DAMAGED NAMES: ") && text.contains("defs: bin\\xffary"),
        "{text}"
    );
    cli(server, work, &["jobs"]).success();
    cli(server, work, &["runs", "list"]).success();
    let console = WebProcess::start(&server.url(), work, &[]);
    for path in [
        "/",
        "/jobs",
        "/runs",
        "/api/v1/jobs",
        "/api/v1/status",
        "/api/v1/runs",
    ] {
        let answer = console.get(path);
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }
    let overview = console.get("/");
    assert!(
        overview.body.contains("bad\\xffkey"),
        "the overview names no damaged name: {}",
        overview.body
    );

    let replica = scenario.replica("r1", &[]);
    assert!(
        wait_until(Duration::from_secs(20), || scenario.ledger().len() >= 3),
        "the every-second job did not run:\n{}",
        replica.log()
    );
    assert!(
        wait_until(Duration::from_secs(20), || !any_damaged_left(&mut redis)),
        "the damaged names were not removed:\n{}",
        replica.log()
    );
    assert!(
        !replica.log().contains("planner tick failed"),
        "{}",
        replica.log()
    );
}
