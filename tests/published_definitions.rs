//! Published definitions damaged or edited in Redis: their hashes of another type fail no
//! reader and are replaced by the leader, and a definition edited without its hash is shown
//! by the console's overview as the leader published it, for as long as docs/web.md says.

use std::time::Duration;

use redis::Commands;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::schemas::Schemas;
use crate::util::web::WebProcess;
use crate::util::{cli, keys, one_document, wait_until};

/// `lim`, a job that fires once a year, as the only schedule.
const YEARLY: &str = "[jobs.lim]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n";

/// A scenario whose replica r1 declares [`YEARLY`], returned once the job is published.
fn published() -> (Scenario, ReplicaProcess) {
    let scenario = Scenario::new();
    scenario.write_jobs(YEARLY);
    let replica = scenario.replica("r1", &[]);
    let mut redis = scenario.server.connection();
    assert!(
        wait_until(Duration::from_secs(10), || redis
            .hexists(keys().defs(), "lim")
            .expect("HEXISTS")),
        "the job was not published:\n{}",
        replica.log()
    );
    (scenario, replica)
}

/// The published definitions' hashes of another type (damaged, or written by hand) fail no
/// reader: `status`, the console's overview and `/api/v1/status` answer, each job's hash taken
/// from its definition and the damage said; and the leader replaces them.
#[test]
fn definition_hashes_of_another_type_fail_no_reader_and_the_leader_replaces_them() {
    let (scenario, mut replica) = published();
    let (server, work) = (&scenario.server, &scenario.dir);
    let mut redis = server.connection();
    let hash_published: String = redis.hget(keys().def_hashes(), "lim").expect("HGET");
    // The console keeps the definitions it parsed by hash: one read before the damage, so that
    // the reads after it go the way of a console that has run a while.
    let console = WebProcess::start(&server.url(), work.path(), &[]);
    assert_eq!(console.get("/api/v1/status").status, 200);
    assert_eq!(replica.terminate(Duration::from_secs(10)), Some(0));
    let () = redis.set(keys().def_hashes(), "oops").expect("SET");

    let status = one_document(&cli(server, work.path(), &["status", "--json"]).success());
    assert_eq!(status["definition_hashes_damaged"], true, "{status}");
    Schemas::of_the_docs().assert_matches("status.json", &status);
    let text = cli(server, work.path(), &["status"]).stdout;
    assert!(text.contains("DEFINITION HASHES DAMAGED"), "{text}");
    let api = console.get("/api/v1/status");
    assert_eq!(api.status, 200, "{}", api.body);
    let api = api.json();
    assert_eq!(api["definition_hashes_damaged"], true);
    let jobs: Vec<&str> = api["jobs"]
        .as_array()
        .map(|jobs| jobs.iter().filter_map(|job| job["job"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(jobs, ["lim"]);
    let page = console.get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("hashes are damaged"), "{}", page.body);
    for path in ["/jobs/lim", "/api/v1/jobs/lim", "/jobs"] {
        let answer = console.get(path);
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }

    let mut replica = scenario.replica("r1", &[]);
    let replaced = wait_until(Duration::from_secs(20), || {
        redis
            .hget::<_, _, Option<String>>(keys().def_hashes(), "lim")
            .ok()
            .flatten()
            .is_some_and(|hash| hash == hash_published)
    });
    assert!(replaced, "the hashes were not replaced:\n{}", replica.log());
    let status = one_document(&cli(server, work.path(), &["status", "--json"]).stdout);
    assert_eq!(status["definition_hashes_damaged"], false, "{status}");
    assert_eq!(replica.terminate(Duration::from_secs(10)), Some(0));
}

/// A definition edited in Redis without its hash shows on the console's overview (and in
/// `/api/v1/status`) as the leader published it by that hash, and on its job's page as edited,
/// until the leader writes it back: within `jobs / 200` seconds, rounded up, of a replica
/// leading, one second here (docs/web.md).
#[test]
fn a_definition_edited_without_its_hash_is_shown_as_published_until_the_leader_writes_it_back() {
    let (scenario, mut replica) = published();
    let (server, work) = (&scenario.server, &scenario.dir);
    let console = WebProcess::start(&server.url(), work.path(), &[]);
    let next_fire = || -> String {
        let status = console.get("/api/v1/status").json();
        status["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|job| job["job"] == "lim"))
            .and_then(|job| job["next_fire"].as_str())
            .unwrap_or_else(|| panic!("no next fire of lim in {status}"))
            .to_owned()
    };
    let published_fire = next_fire();
    assert!(
        published_fire.contains("-01-01T00:00:00"),
        "{published_fire}"
    );
    replica.terminate(Duration::from_secs(10));
    let mut redis = server.connection();
    let definition: String = redis.hget(keys().defs(), "lim").expect("HGET");
    let edited = definition.replace("0 0 1 1 *", "0 12 * * *");
    assert_ne!(
        edited, definition,
        "the schedule is in the definition as written"
    );
    let () = redis.hset(keys().defs(), "lim", &edited).expect("HSET");

    // No leader: the edit stays, and the two readers disagree.
    assert_eq!(next_fire(), published_fire, "the overview read the edit");
    let page = console.get("/jobs/lim");
    assert!(page.body.contains("0 12 * * *"), "{}", page.body);

    // The lease the stopped replica held, if it left one: the new one's is another epoch.
    let before: Option<String> = redis.get(keys().leader()).expect("GET");
    let replica = scenario.replica("r1", &[]);
    assert!(
        wait_until(Duration::from_secs(30), || {
            let now: Option<String> = redis.get(keys().leader()).expect("GET");
            now.is_some() && now != before
        }),
        "no replica leads:\n{}",
        replica.log()
    );
    let led = std::time::Instant::now();
    let written_back = wait_until(Duration::from_secs(30), || {
        redis
            .hget::<_, _, String>(keys().defs(), "lim")
            .is_ok_and(|now| now == definition)
    });
    let took = led.elapsed();
    assert!(written_back, "never written back:\n{}", replica.log());
    // One planner tick (1 s) for one job, with room for a loaded machine.
    assert!(
        took < Duration::from_secs(5),
        "written back {took:?} after a replica led"
    );
    let page = console.get("/jobs/lim");
    assert!(!page.body.contains("0 12 * * *"), "{}", page.body);
    assert_eq!(next_fire(), published_fire);
}
