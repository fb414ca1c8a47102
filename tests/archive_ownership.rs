//! Who an archive belongs to and what `run --archive` refuses, with real replicas: a namespace
//! archives to one archive and a replica told another is refused at start, the namespace's
//! mark deleted while replicas export is written back, an archive belongs to one namespace, a
//! URL holding credentials is refused without being repeated, and `--archive-part-age` is
//! refused without `--archive` or under a second.

use std::time::Duration;

use redis::Commands;

use crate::util::archive::stop;
use crate::util::scenario::Scenario;
use crate::util::web::WebProcess;
use crate::util::{cli, keys, one_document, wait_until};

/// Where the namespace says it archives.
fn marker(scenario: &Scenario) -> Option<String> {
    scenario
        .server
        .connection()
        .get(keys().archive_marker())
        .expect("GET")
}

/// A replica told another archive than the namespace's refuses to start, naming both and how
/// to move an archive, and leaves the namespace's mark as it was; one told the same archive
/// with a trailing slash starts and exports.
#[test]
fn a_replica_told_another_archive_refuses_to_start_and_a_trailing_slash_is_the_same() {
    let scenario = Scenario::new();
    let first = format!("file://{}", scenario.dir.path().join("first").display());
    let second = format!("file://{}", scenario.dir.path().join("second").display());
    scenario.write_jobs(&scenario.every_second_job());
    let r1 = scenario.replica("r1", &["--archive", &first, "--archive-part-age", "1s"]);
    assert!(
        wait_until(Duration::from_secs(30), || marker(&scenario).is_some()),
        "r1 never marked the namespace\n{}",
        r1.log()
    );
    let mut r2 = scenario.replica("r2", &["--archive", &second]);
    let exit = r2.wait_exit(Duration::from_secs(30));
    assert!(
        exit.is_some_and(|status| !status.success()),
        "r2 started: {exit:?}\n{}",
        r2.log()
    );
    let said = r2.log();
    assert!(
        said.contains(&format!("namespace archives to {first}, not {second}"))
            && said.contains("docs/operations.md"),
        "{said}"
    );
    assert_eq!(marker(&scenario).as_deref(), Some(first.as_str()));
    // The same archive written another way is the namespace's: r3 exports beside r1.
    let r3 = scenario.replica("r3", &["--archive", &format!("{first}/")]);
    let exporting = || {
        let status = cli(&scenario.server, scenario.dir.path(), &["status", "--json"]);
        let status = one_document(&status.stdout);
        status["archive"]["exporting"]
            .as_array()
            .is_some_and(|ids| ids.iter().any(|id| id == "r3"))
    };
    assert!(
        wait_until(Duration::from_secs(30), exporting),
        "r3 never exported\n{}",
        r3.log()
    );
    let logs = stop(vec![r1, r3]);
    assert_eq!(marker(&scenario).as_deref(), Some(first.as_str()), "{logs}");
}

/// The namespace's archive marker deleted while replicas export is written back by them, so
/// that `status` goes on naming the archive and a replica started without `--archive` is
/// still refused; and so is the archive's claim for the namespace, lost by its store, so that
/// another namespace cannot take the archive meanwhile.
#[test]
fn a_deleted_archive_marker_is_written_back_by_the_exporting_replicas() {
    let scenario = Scenario::new();
    let url = format!("file://{}", scenario.dir.path().join("archive").display());
    scenario.write_jobs(&scenario.every_second_job());
    let r1 = scenario.replica("r1", &["--archive", &url, "--archive-part-age", "1s"]);
    assert!(
        wait_until(Duration::from_secs(30), || marker(&scenario).is_some()),
        "r1 never marked the namespace\n{}",
        r1.log()
    );
    let deleted: u64 = scenario
        .server
        .connection()
        .del(keys().archive_marker())
        .expect("DEL");
    assert_eq!(deleted, 1);
    assert!(
        wait_until(Duration::from_secs(30), || marker(&scenario).as_deref()
            == Some(url.as_str())),
        "r1 never wrote the marker back\n{}",
        r1.log()
    );
    let status =
        one_document(&cli(&scenario.server, scenario.dir.path(), &["status", "--json"]).stdout);
    assert_eq!(status["archive"]["url"], url.as_str(), "{status:#}");
    let mut r2 = scenario.replica("r2", &[]);
    let exit = r2.wait_exit(Duration::from_secs(30));
    assert!(
        exit.is_some_and(|status| !status.success()),
        "r2 started without --archive: {exit:?}\n{}",
        r2.log()
    );
    assert!(
        r2.log().contains(&format!("namespace archives to {url}")),
        "{}",
        r2.log()
    );
    let claim = scenario
        .dir
        .path()
        .join("archive")
        .join("runs/v1/namespace.json");
    std::fs::remove_file(&claim).expect("the claim, written at r1's start");
    assert!(
        wait_until(Duration::from_secs(30), || claim.exists()),
        "r1 never wrote the archive's claim back\n{}",
        r1.log()
    );
    assert!(
        r1.log().contains("was missing: written again"),
        "{}",
        r1.log()
    );
    stop(vec![r1]);
}

/// An `--archive` URL with credentials in it is refused, by `run` and by `history`, with a
/// message that sends to the AWS_* variables and never repeats the secret, and nothing of it
/// reaches Redis.
#[test]
fn an_archive_url_with_credentials_is_refused_without_repeating_them() {
    let scenario = Scenario::new();
    scenario.write_jobs(&scenario.every_second_job());
    for url in ["s3://KEY:SECRET@bucket/prefix", "file://user:SECRET@/dir"] {
        let mut replica = scenario.replica("r1", &["--archive", url]);
        let exit = replica.wait_exit(Duration::from_secs(30));
        let said = replica.log();
        assert!(
            exit.is_some_and(|status| !status.success()),
            "{url} accepted: {exit:?}\n{said}"
        );
        assert!(said.contains("AWS_SECRET_ACCESS_KEY"), "{said}");
        assert!(!said.contains("SECRET@"), "{said}");
        let history = cli(
            &scenario.server,
            scenario.dir.path(),
            &["history", "--archive", url],
        );
        assert_ne!(history.code, Some(0), "{}", history.stdout);
        assert!(
            history.stderr.contains("AWS_SECRET_ACCESS_KEY"),
            "{}",
            history.stderr
        );
        assert!(!history.stderr.contains("SECRET@"), "{}", history.stderr);
    }
    assert_eq!(marker(&scenario), None);
}

/// An archive belongs to the namespace whose replica first exported to it: a replica of
/// another namespace given the same archive refuses to start, and `history --archive` and
/// `runs show --archive` of another namespace refuse it, naming its namespace and a prefix
/// per namespace, and so does the console when the namespace's mark names it.
#[test]
fn an_archive_belongs_to_one_namespace() {
    let scenario = Scenario::new();
    let archive = scenario.dir.path().join("archive");
    let url = format!("file://{}", archive.display());
    scenario.write_jobs(&scenario.every_second_job());
    let first = scenario.replica(
        "o1",
        &[
            "--namespace",
            "other",
            "--archive",
            &url,
            "--archive-part-age",
            "1s",
        ],
    );
    let claimed = archive.join("runs/v1/namespace.json");
    assert!(
        wait_until(Duration::from_secs(30), || claimed.exists()),
        "o1 never claimed the archive\n{}",
        first.log()
    );
    let owner: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&claimed).expect("read")).expect("JSON");
    assert_eq!(owner["namespace"], "other");
    // The harness's namespace, `test`.
    let mut r1 = scenario.replica("r1", &["--archive", &url]);
    let exit = r1.wait_exit(Duration::from_secs(30));
    let said = r1.log();
    assert!(
        exit.is_some_and(|status| !status.success()),
        "a replica of another namespace started: {exit:?}\n{said}"
    );
    assert!(
        said.contains("belongs to namespace \"other\", not \"test\"")
            && said.contains("file:///DIR/test"),
        "{said}"
    );
    // Refused before it said anything in its namespace.
    assert_eq!(marker(&scenario), None);
    for args in [
        &["history", "--archive", &url][..],
        &[
            "runs",
            "show",
            "--archive",
            &url,
            "01HZZZZZZZZZZZZZZZZZZZZZZZ",
        ][..],
    ] {
        let read = cli(&scenario.server, scenario.dir.path(), args);
        assert_ne!(read.code, Some(0), "{args:?}: {}", read.stdout);
        assert!(
            read.stderr.contains("belongs to namespace \"other\""),
            "{args:?}: {}",
            read.stderr
        );
    }
    // The namespace's mark naming the other's archive (edited by hand, or brought back by a
    // restore): the console refuses to show the other namespace's runs as this one's.
    let _: () = scenario
        .server
        .connection()
        .set(keys().archive_marker(), &url)
        .expect("SET");
    let console = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let run = "tick@1700000000000";
    let api = console.get(&format!("/api/v1/runs/{run}"));
    assert_eq!(api.status, 503, "{}", api.body);
    assert_eq!(
        api.json()["error"]["code"],
        "archive-unavailable",
        "{}",
        api.body
    );
    assert!(
        api.body.contains("the archive of another namespace"),
        "{}",
        api.body
    );
    let page = console.get(&format!("/runs/{run}"));
    assert_eq!(page.status, 503, "{}", page.body);
    assert!(
        page.body.contains("the archive of another namespace"),
        "{}",
        page.body
    );
    stop(vec![first]);
}

/// `--archive-part-age` without `--archive`, or shorter than a second, is refused with a
/// message saying why, where the first was ignored and the second taken.
#[test]
fn an_archive_part_age_without_archive_or_of_zero_is_refused() {
    let scenario = Scenario::new();
    let url = format!("file://{}", scenario.dir.path().join("archive").display());
    let alone = cli(
        &scenario.server,
        scenario.dir.path(),
        &["run", "--archive-part-age", "5s"],
    );
    assert_eq!(alone.code, Some(2), "{}", alone.stderr);
    assert!(alone.stderr.contains("--archive <URL>"), "{}", alone.stderr);
    let zero = cli(
        &scenario.server,
        scenario.dir.path(),
        &["run", "--archive", &url, "--archive-part-age", "0s"],
    );
    assert_eq!(zero.code, Some(2), "{}", zero.stderr);
    assert!(
        zero.stderr.contains("shorter than a second"),
        "{}",
        zero.stderr
    );
    assert_eq!(marker(&scenario), None);
}
