//! Damaged data: entries of run lists and sets that are no run id, job slots that no run of the
//! job holds, and records no redcron script wrote as they are: found, freed or given an expiry,
//! so that none blocks a job or a listing, or stays for ever unseen.

use std::collections::HashMap;
use std::fmt;

use redis::{AsyncCommands, FromRedisValue, Value};

use super::During;
use super::{Store, StoreError, millis, scripts};

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

impl Entry {
    /// The entry an operator names by what a listing printed (see `Display`): `bin\xffary` is
    /// the bytes `bin`, 0xff, `ary`, as `\\`, `\n`, `\t`, `\r` and `\u{1b}` are the characters
    /// they stand for. A backslash that starts none of these is kept as written. A run id is
    /// printed as it is, backslashes and all, so a caller looks for the text as written first.
    pub fn from_escaped(text: &str) -> Self {
        let mut bytes = Vec::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find('\\') {
            bytes.extend_from_slice(&rest.as_bytes()[..at]);
            let escape = &rest[at + 1..];
            match unescape(escape) {
                Some((decoded, used)) => {
                    bytes.extend_from_slice(&decoded);
                    rest = &escape[used..];
                }
                None => {
                    bytes.push(b'\\');
                    rest = escape;
                }
            }
        }
        bytes.extend_from_slice(rest.as_bytes());
        bytes.into()
    }
}

/// The bytes one escape written by `Entry`'s `Display` stands for, and how many bytes of
/// `escape` (the text after its backslash) it takes; `None` for no such escape.
fn unescape(escape: &str) -> Option<(Vec<u8>, usize)> {
    let character = |c: char| {
        let mut buffer = [0; 4];
        c.encode_utf8(&mut buffer).as_bytes().to_vec()
    };
    match escape.as_bytes().first()? {
        b'\\' => Some((vec![b'\\'], 1)),
        b'n' => Some((vec![b'\n'], 1)),
        b't' => Some((vec![b'\t'], 1)),
        b'r' => Some((vec![b'\r'], 1)),
        b'x' => {
            let byte = u8::from_str_radix(escape.get(1..3)?, 16).ok()?;
            Some((vec![byte], 3))
        }
        b'u' => {
            let (digits, _) = escape.strip_prefix("u{")?.split_once('}')?;
            let c = char::from_u32(u32::from_str_radix(digits, 16).ok()?)?;
            Some((character(c), digits.len() + 3))
        }
        _ => None,
    }
}

/// A run's record as Redis holds it, each name and value that is not UTF-8 escaped (see
/// [`Entry`]) and named under `damaged`, so that a record with a damaged field is shown, not
/// refused whole.
pub(super) fn readable_record(record: Vec<(Entry, Entry)>) -> HashMap<String, String> {
    let mut unreadable = Vec::new();
    let mut fields: HashMap<String, String> = record
        .into_iter()
        .map(|(name, value)| {
            let damaged = name.run_id().is_none() || value.run_id().is_none();
            let name = name.to_string();
            if damaged {
                unreadable.push(name.clone());
            }
            (name, value.to_string())
        })
        .collect();
    if !unreadable.is_empty() {
        unreadable.sort_unstable();
        fields.insert(
            "damaged".to_owned(),
            format!("not UTF-8, shown escaped: {}", unreadable.join(", ")),
        );
    }
    fields
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

/// One page of the reapers' walk over the namespace's keys: the records and ready lists in it,
/// and where the next page starts. The damaged records get an expiry
/// ([`Store::expire_damaged_keys`]), the runs left in no list are put back
/// ([`Store::requeue_stray_runs`]), the ready lists' queues go into the index
/// ([`Store::index_ready_queues`]): one walk serves all three.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordPage {
    /// The `SCAN` cursor of the next page; 0 when this page ended a round over every key.
    pub next: u64,
    /// The run and workflow records of the page, as key suffixes (`run:<id>`, `wf:<id>`),
    /// bytes as Redis holds them.
    pub suffixes: Vec<Vec<u8>>,
    /// The queues of the ready lists of the page, for the index of queues with ready runs
    /// ([`Store::index_ready_queues`]).
    pub queues: Vec<String>,
}

impl RecordPage {
    /// The ids of the run records of the page.
    pub fn run_ids(&self) -> impl Iterator<Item = &[u8]> {
        self.suffixes
            .iter()
            .filter_map(|suffix| suffix.strip_prefix(b"run:".as_slice()))
    }
}

/// What the reapers found damaged lately: records that no redcron script wrote as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DamagedKeys {
    /// How many were found within the retention.
    pub count: u64,
    /// The first few, oldest first: key suffixes (`run:<id>`, `wf:<id>`), escaped when they
    /// are not UTF-8 (see [`Entry`]).
    pub keys: Vec<String>,
}

impl Store {
    /// Drops from the active set those of its first `limit` expired entries that are no run
    /// id (not UTF-8): the reaper takes expired leases oldest first, a batch at a time, and
    /// would never reach the runs behind a batch of them. Returns how many were dropped.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn drop_damaged_leases(&self, limit: usize) -> Result<u64, StoreError> {
        let now = self.now_ms().await?;
        let expired: Vec<Entry> = self
            .connection
            .clone()
            .zrangebyscore_limit(self.keys.active(), "-inf", now, 0, limit as isize)
            .await
            .during(&self.metrics, "drop_damaged_leases")?;
        let unreadable: Vec<&[u8]> = expired
            .iter()
            .filter(|entry| entry.run_id().is_none())
            .map(Entry::as_bytes)
            .collect();
        if unreadable.is_empty() {
            return Ok(0);
        }
        scripts::DROP_DAMAGED_LEASES
            .key(self.keys.active())
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(unreadable)
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "drop_damaged_leases")
    }

    /// One page of the namespace's keys, from `cursor` (0 starts a round): its run and
    /// workflow records, and the queues of its ready lists.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn record_page(&self, cursor: u64) -> Result<RecordPage, StoreError> {
        let prefix = self.keys.prefix();
        let (next, keys) = self.scan_page("", cursor, "record_page").await?;
        let suffixes = keys
            .iter()
            .filter_map(|key| key.strip_prefix(prefix.as_bytes()))
            .filter(|suffix| suffix.starts_with(b"run:") || suffix.starts_with(b"wf:"))
            .map(<[u8]>::to_vec)
            .collect();
        let queues = keys
            .iter()
            .filter_map(|key| self.queue_of_ready_list(key))
            .collect();
        Ok(RecordPage {
            next,
            suffixes,
            queues,
        })
    }

    /// Gives the records of `page` that are damaged (without the fields their kind has, or not
    /// a hash) and have no expiry the retention as one, remembering them for `status`. Returns
    /// how many were found.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn expire_damaged_keys(&self, page: &RecordPage) -> Result<u64, StoreError> {
        if page.suffixes.is_empty() {
            return Ok(0);
        }
        scripts::EXPIRE_DAMAGED_KEYS
            .key(self.keys.damaged_keys())
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(millis(self.settings.retention))
            .arg(self.now_arg())
            .arg(&page.suffixes)
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "expire_damaged_keys")
    }

    /// The records the reapers found damaged within the retention: how many, and the first
    /// `limit`.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn damaged_keys(&self, limit: usize) -> Result<DamagedKeys, StoreError> {
        let end = isize::try_from(limit).unwrap_or(isize::MAX) - 1;
        let (count, keys): (u64, Vec<Entry>) = redis::pipe()
            .zcard(self.keys.damaged_keys())
            .zrange(self.keys.damaged_keys(), 0, end)
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "damaged_keys")?;
        Ok(DamagedKeys {
            count,
            keys: keys.iter().map(Entry::to_string).collect(),
        })
    }

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

    #[test]
    fn an_unreadable_entry_is_named_again_by_the_text_a_listing_printed() {
        for bytes in [
            &b"bin\xffary"[..],
            b"\xff",
            b"tab\there\\\x1b[31m\r\n\x00\xc3",
            b"x\\xff\xfe",
            b"caf\xc3\xa9\x7f\xff",
        ] {
            let entry = Entry::from(bytes.to_vec());
            assert_eq!(Entry::from_escaped(&entry.to_string()), entry, "{entry}");
        }
        assert_eq!(Entry::from_escaped("bin\\xffary").as_bytes(), b"bin\xffary");
        // A backslash that starts no escape is kept, so the text stays a run id.
        assert_eq!(
            Entry::from_escaped("a\\q\\x4"),
            Entry::Run("a\\q\\x4".to_owned())
        );
    }

    #[test]
    fn a_record_with_a_field_that_is_not_utf8_is_read_with_it_escaped_and_named() {
        let record = readable_record(vec![
            (Entry::from(b"job".to_vec()), Entry::from(b"lim".to_vec())),
            (
                Entry::from(b"queue".to_vec()),
                Entry::from(b"q\xff".to_vec()),
            ),
        ]);
        assert_eq!(record["job"], "lim");
        assert_eq!(record["queue"], "q\\xff");
        assert_eq!(record["damaged"], "not UTF-8, shown escaped: queue");
        let sound = readable_record(vec![(
            Entry::from(b"job".to_vec()),
            Entry::from(b"lim".to_vec()),
        )]);
        assert!(!sound.contains_key("damaged"));
    }
}
