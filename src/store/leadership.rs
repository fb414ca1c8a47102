//! The leader lease: taken, renewed and released with a fencing token (`acquire_leader.lua`,
//! `renew_leader.lua`, `release_leader.lua`).

use std::time::Duration;

use redis::AsyncCommands;

use super::During;
use super::{Store, StoreError, millis, scripts};

/// The leader lease this replica holds: `<replica id>:<epoch>`. Every planner write presents it,
/// and is refused once another replica has taken the lease (fencing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderToken(String);

impl LeaderToken {
    /// The token as stored in Redis.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The epoch: higher for every later acquisition.
    pub fn epoch(&self) -> Option<u64> {
        self.0.rsplit_once(':')?.1.parse().ok()
    }
}

/// The replica id a leader token names, without its epoch (`r1` of `r1:7`).
pub(super) fn token_replica(token: &str) -> &str {
    token.rsplit_once(':').map_or(token, |(id, _)| id)
}

/// The answer to an attempt to take the leader lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquisition {
    /// This replica is the leader now.
    Acquired(LeaderToken),
    /// Another replica holds the lease: its token.
    Held(String),
}

impl Store {
    /// The replica that holds the leader lease now, if one does: one read, for what shows the
    /// leader beside something else (every page of the console).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn leader_id(&self) -> Result<Option<String>, StoreError> {
        let token: Option<String> = self
            .connection
            .clone()
            .get(self.keys.leader())
            .await
            .during(&self.metrics, "leader_id")?;
        Ok(token.map(|token| token_replica(&token).to_owned()))
    }

    /// Takes the leader lease for `ttl` if nobody holds it.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn acquire_leader(
        &self,
        replica: &str,
        ttl: Duration,
    ) -> Result<Acquisition, StoreError> {
        let (acquired, token): (i64, String) = scripts::ACQUIRE_LEADER
            .key(self.keys.leader())
            .key(self.keys.epoch())
            .arg(replica)
            .arg(millis(ttl))
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "acquire_leader")?;
        Ok(if acquired == 1 {
            Acquisition::Acquired(LeaderToken(token))
        } else {
            Acquisition::Held(token)
        })
    }

    /// Extends the lease held with `token`; `false` means it is lost: step down at once.
    ///
    /// # Errors
    /// Redis errors (the lease may then run out: the caller must stop planning before it does).
    pub async fn renew_leader(
        &self,
        token: &LeaderToken,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let renewed: i64 = scripts::RENEW_LEADER
            .key(self.keys.leader())
            .arg(token.as_str())
            .arg(millis(ttl))
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "renew_leader")?;
        Ok(renewed == 1)
    }

    /// Gives up the lease held with `token`; `false` when it was no longer held.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn release_leader(&self, token: &LeaderToken) -> Result<bool, StoreError> {
        let released: i64 = scripts::RELEASE_LEADER
            .key(self.keys.leader())
            .arg(token.as_str())
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "release_leader")?;
        Ok(released == 1)
    }
}
