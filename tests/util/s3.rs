//! A private S3-compatible server per test: `moto_server` (moto in server mode, from the
//! virtual environment `scripts/install-test-tools` makes) on a free loopback port, with one
//! bucket, killed on drop; frozen and thawed to take the store down and bring it back with
//! what it held (moto keeps its objects in memory: a restarted one would have lost them). Its
//! bucket, under a prefix, is an archive the archive's scenarios run against.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures_util::TryStreamExt;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use object_store::aws::AmazonS3Builder;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::Value;
use tempfile::TempDir;

use super::archive::{ArchiveStore, part_records};
use super::redis_server::free_port;
use super::wait::wait_for;

/// The bucket each server holds.
pub const BUCKET: &str = "archive";

/// The key prefix the tests archive under, inside the bucket.
pub const PREFIX: &str = "redcron/prod";

/// The region and credentials replicas sign with: moto takes any.
const REGION: &str = "us-east-1";
const ACCESS_KEY_ID: &str = "testing";
const SECRET_ACCESS_KEY: &str = "testing";

/// Where `scripts/install-test-tools` installs moto: a virtual environment in the build
/// directory, made again after `cargo clean`.
fn moto_server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-tools/moto/bin/moto_server")
}

/// A running `moto_server` that only this test uses.
pub struct S3Server {
    child: Child,
    port: u16,
    /// Holds the server's log.
    dir: TempDir,
}

impl S3Server {
    /// Starts `moto_server` on a free loopback port and waits until it has made the bucket
    /// [`BUCKET`].
    ///
    /// # Panics
    /// When moto is not installed (the message says how to install it) or the server does not
    /// make the bucket within 60 s (the message includes its log).
    pub fn start() -> Self {
        let program = moto_server();
        assert!(
            program.exists(),
            "{} is missing: the S3 tests need moto's server in a virtual environment. Make it \
             with scripts/install-test-tools (it needs python3 and python3-venv)",
            program.display()
        );
        let dir = tempfile::tempdir().expect("a temp dir for moto's log");
        let log = std::fs::File::create(dir.path().join("moto.log")).expect("moto's log");
        let port = free_port();
        let child = Command::new(&program)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("moto's log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", program.display()));
        let server = Self { child, port, dir };
        // Making the bucket is the first request it answers: a loaded machine takes seconds to
        // start its Python.
        let made = wait_for(Duration::from_secs(60), || {
            server
                .request(&format!("PUT /{BUCKET} HTTP/1.1"))
                .ok()
                .filter(|status| status.starts_with("HTTP/1.1 200"))
        });
        assert!(
            made.is_some(),
            "moto_server on port {port} did not make the bucket within 60 s\n{}",
            server.log()
        );
        server
    }

    /// One request without a body, its status line: what moto answers without a signature.
    fn request(&self, line: &str) -> std::io::Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            stream,
            "{line}\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer.lines().next().unwrap_or_default().to_owned())
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every object of the bucket: its name and its bytes.
    pub fn objects(&self) -> Vec<(String, Vec<u8>)> {
        // The HTTP client takes the process's TLS provider, as redcron's does.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let store: Arc<dyn ObjectStore> = Arc::new(
            AmazonS3Builder::new()
                .with_endpoint(self.endpoint())
                .with_allow_http(true)
                .with_region(REGION)
                .with_access_key_id(ACCESS_KEY_ID)
                .with_secret_access_key(SECRET_ACCESS_KEY)
                .with_bucket_name(BUCKET)
                .build()
                .expect("a client of moto"),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let listed: Vec<_> = store
                .list(None)
                .try_collect()
                .await
                .unwrap_or_else(|error| panic!("listing the bucket: {error}\n{}", self.log()));
            let mut objects = Vec::new();
            for meta in listed {
                let bytes = match store.get(&meta.location).await {
                    Ok(found) => found.bytes().await,
                    Err(error) => Err(error),
                }
                .unwrap_or_else(|error| panic!("reading {}: {error}", meta.location));
                objects.push((meta.location.to_string(), bytes.to_vec()));
            }
            objects
        })
    }

    /// Freezes the server (SIGSTOP): it accepts connections and answers none, as a store that
    /// hangs does.
    pub fn freeze(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// Thaws a frozen server (SIGCONT), with every object it held.
    pub fn thaw(&self) {
        self.signal(Signal::SIGCONT);
    }

    fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
        kill(pid, signal).expect("signal moto_server");
    }
}

/// The bucket's prefix [`PREFIX`] as an archive, `s3://archive/redcron/prod`.
impl ArchiveStore for S3Server {
    fn url(&self) -> String {
        format!("s3://{BUCKET}/{PREFIX}")
    }

    /// What a replica reaches the server with, as it would reach any S3 store.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_REGION", REGION.to_owned()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.to_owned()),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
        ]
    }

    /// Asserts that every object of the bucket is a part under [`PREFIX`], but for the one
    /// naming the archive's namespace.
    #[track_caller]
    fn archived(&self) -> Vec<(String, Value)> {
        let mut records = Vec::new();
        let claim = format!("{PREFIX}/runs/v1/namespace.json");
        for (name, bytes) in self.objects() {
            if name == claim {
                continue;
            }
            assert!(
                name.starts_with(&format!("{PREFIX}/runs/v1/")) && name.ends_with(".ndjson.gz"),
                "{name} is no part under {PREFIX}"
            );
            for record in part_records(&name, &bytes) {
                records.push((name.clone(), record));
            }
        }
        records
    }

    fn log(&self) -> String {
        let path = self.dir.path().join("moto.log");
        std::fs::read_to_string(&path).unwrap_or_else(|error| format!("(no log: {error})"))
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
