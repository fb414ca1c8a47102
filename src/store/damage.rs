//! Damaged data: entries of run lists and sets that are no run id, and the job slots that no run
//! of the job holds, found and freed so that neither blocks a job nor a listing.

use std::fmt;

use redis::{FromRedisValue, Value};

use super::During;
use super::{Store, StoreError, scripts};

/// An entry of a run list or set as Redis holds it. Every run id is UTF-8: an entry that is not
/// (written by something else, or damaged) is no run of any job, and every listing names it,
/// escaped, instead of failing on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A run id; whether a run has it is for its record to say.
    Run(String),
    /// Bytes that are not UTF-8, as Redis holds them.
    Unreadable(Vec<u8>),
}

impl Entry {
    /// The run id, unless the entry is unreadable.
    pub fn run_id(&self) -> Option<&str> {
        match self {
            Self::Run(run_id) => Some(run_id),
            Self::Unreadable(_) => None,
        }
    }

    /// The entry as Redis holds it, for a command that must name it to Redis.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Run(run_id) => run_id.as_bytes(),
            Self::Unreadable(bytes) => bytes,
        }
    }
}

impl From<Vec<u8>> for Entry {
    fn from(bytes: Vec<u8>) -> Self {
        match String::from_utf8(bytes) {
            Ok(run_id) => Self::Run(run_id),
            Err(error) => Self::Unreadable(error.into_bytes()),
        }
    }
}

impl FromRedisValue for Entry {
    fn from_redis_value(value: Value) -> Result<Self, redis::ParsingError> {
        Ok(Vec::<u8>::from_redis_value(value)?.into())
    }
}

/// A run id as is; an unreadable entry with its bytes that are not UTF-8 as `\xNN` (and its
/// control characters and backslashes escaped), as `less` shows them: `bin\xffary`.
impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Run(run_id) => f.write_str(run_id),
            Self::Unreadable(bytes) => {
                for chunk in bytes.utf8_chunks() {
                    for c in chunk.valid().chars() {
                        if c.is_control() || c == '\\' {
                            write!(f, "{}", c.escape_default())?;
                        } else {
                            write!(f, "{c}")?;
                        }
                    }
                    for byte in chunk.invalid() {
                        write!(f, "\\x{byte:02x}")?;
                    }
                }
                Ok(())
            }
        }
    }
}

impl Store {
    /// Hands the slots of every published job whose deadline passed, or that no run of the job
    /// holds, to the job's waiting runs: what frees them when no run of the job comes or ends
    /// to do it. Returns how many entries left the waiting lists.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn free_expired_slots(&self) -> Result<u64, StoreError> {
        scripts::FREE_EXPIRED_SLOTS
            .key(self.keys.defs())
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(self.now_arg())
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "free_expired_slots")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_that_is_not_utf8_is_shown_escaped_and_a_run_id_as_is() {
        let entry = Entry::from(b"bin\xffary\n\\".to_vec());
        assert_eq!(entry.to_string(), "bin\\xffary\\n\\\\");
        assert_eq!(entry.run_id(), None);
        assert_eq!(entry.as_bytes(), b"bin\xffary\n\\");
        let run = Entry::from(b"nightly@1767225600000".to_vec());
        assert_eq!(run.to_string(), "nightly@1767225600000");
        assert_eq!(run.run_id(), Some("nightly@1767225600000"));
    }
}
