//! Users' passwords verified on two threads of the server's own, whatever number of requests
//! send them: Argon2 takes about 19 MiB and tens of milliseconds a check, on purpose, so a
//! check per request on the runtime's blocking pool let a flood of wrong passwords run
//! hundreds at once, each on a thread whose allocator kept its 19 MiB after (16 at once took
//! the server from 50 to 496 MB). Checks wait their turn instead; a user's password verified
//! is remembered for a minute, so that a browser, which sends it with every request, pays
//! Argon2 once a minute rather than once a page.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use argon2::password_hash::{PasswordHash, PasswordVerifier};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

/// How many checks run at once: the server's memory for them is this many Argon2 blocks.
const THREADS: usize = 2;

/// How long a password verified is taken without checking it again.
const REMEMBERED_FOR: Duration = Duration::from_secs(60);

/// How many verified passwords are remembered at most (by a digest, never the password).
const REMEMBERED_MOST: usize = 1_024;

/// A password to check against an Argon2 hash, and where to say whether it matches.
struct Check {
    hash: String,
    password: String,
    answer: oneshot::Sender<bool>,
}

/// The verifying threads and what they verified lately.
pub(super) struct Verifier {
    checks: mpsc::Sender<Check>,
    /// Digests of (user, hash, password) verified, with when.
    remembered: Mutex<HashMap<[u8; 32], Instant>>,
}

impl Verifier {
    /// Starts the verifying threads; they end when the verifier is dropped.
    ///
    /// # Panics
    /// When the system refuses a thread at the server's start.
    pub(super) fn start() -> Arc<Self> {
        let (checks, waiting) = mpsc::channel::<Check>();
        let waiting = Arc::new(Mutex::new(waiting));
        for index in 0..THREADS {
            let waiting = Arc::clone(&waiting);
            std::thread::Builder::new()
                .name(format!("redcron-verify-{index}"))
                .spawn(move || {
                    // One thread waits for the next check while the other may run one.
                    while let Ok(Ok(check)) = waiting.lock().map(|waiting| waiting.recv()) {
                        let matches = PasswordHash::new(&check.hash).is_ok_and(|hash| {
                            argon2::Argon2::default()
                                .verify_password(check.password.as_bytes(), &hash)
                                .is_ok()
                        });
                        // The request may have gone: nothing waits for the answer then.
                        let _ = check.answer.send(matches);
                    }
                })
                .expect("the system gives the server a thread to verify passwords");
        }
        Arc::new(Self {
            checks,
            remembered: Mutex::new(HashMap::new()),
        })
    }

    /// Whether `password` matches `user`'s Argon2 `hash`: remembered for a minute once it did,
    /// else checked on the verifying threads, in turn with the other requests' checks.
    pub(super) async fn verify(&self, user: &str, hash: &str, password: &str) -> bool {
        let digest: [u8; 32] = Sha256::new()
            .chain_update(user.as_bytes())
            .chain_update([0])
            .chain_update(hash.as_bytes())
            .chain_update([0])
            .chain_update(password.as_bytes())
            .finalize()
            .into();
        let now = Instant::now();
        if let Ok(remembered) = self.remembered.lock()
            && remembered
                .get(&digest)
                .is_some_and(|at| now.duration_since(*at) < REMEMBERED_FOR)
        {
            return true;
        }
        let (answer, answered) = oneshot::channel();
        let check = Check {
            hash: hash.to_owned(),
            password: password.to_owned(),
            answer,
        };
        if self.checks.send(check).is_err() {
            return false;
        }
        let matches = answered.await.unwrap_or(false);
        if matches && let Ok(mut remembered) = self.remembered.lock() {
            remembered.retain(|_, at| now.duration_since(*at) < REMEMBERED_FOR);
            if remembered.len() >= REMEMBERED_MOST {
                remembered.clear();
            }
            remembered.insert(digest, now);
        }
        matches
    }
}
