//! The events stream as operators read it: its newest entries, or those of one job among them.

use redis::{AsyncCommands, Value};

use super::Event;
use crate::store::During;
use crate::store::damage::readable_record;
use crate::store::reply::decode;
use crate::store::{Entry, Store, StoreError};

impl Store {
    /// The newest `count` events, newest first. A field name or value that is not UTF-8 is
    /// escaped and named under `damaged` (see [`readable_record`]), not left out.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn recent_events(&self, count: usize) -> Result<Vec<Event>, StoreError> {
        let reply: Vec<(String, Vec<(Entry, Entry)>)> = self
            .connection
            .clone()
            .xrevrange_count(self.keys.events(), "+", "-", count)
            .await
            .during(&self.metrics, "recent_events")?;
        Ok(reply
            .into_iter()
            .map(|(id, fields)| stream_event(&id, fields).1)
            .collect())
    }

    /// The events naming `job` among the newest `count`, newest first: what
    /// [`Store::recent_events`] reads of that job, the other entries passed over as Redis sent
    /// them, so that a read of one job's recent events does not make every job's.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn recent_events_of(
        &self,
        job: &str,
        count: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let reply: Value = redis::cmd("XREVRANGE")
            .arg(self.keys.events())
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "recent_events")?;
        let mut events = Vec::new();
        for entry in decode::<Vec<Value>>("recent_events", reply)? {
            if !may_name(&entry, job) {
                continue;
            }
            let (id, fields): (String, Vec<(Entry, Entry)>) = decode("recent_events", entry)?;
            let (_, event) = stream_event(&id, fields);
            if event.fields.get("job").map(String::as_str) == Some(job) {
                events.push(event);
            }
        }
        Ok(events)
    }
}

/// Whether an entry of the events stream, as Redis answered it, may name `job`: not when its
/// fields, as bytes, hold no `job` or another one, so that its fields are never made into an
/// [`Event`]; an entry of another shape is left to the typed read, which reads or refuses it as
/// [`Store::recent_events`] does.
fn may_name(entry: &Value, job: &str) -> bool {
    let Value::Array(parts) = entry else {
        return true;
    };
    let Some(Value::Array(fields)) = parts.get(1) else {
        return true;
    };
    fields.chunks(2).any(|pair| match pair {
        [Value::BulkString(name), Value::BulkString(value)] => {
            name.as_slice() == b"job" && value.as_slice() == job.as_bytes()
        }
        [Value::BulkString(_), _] => false,
        _ => true,
    })
}

/// An entry of the events stream as read: where it is (its id's milliseconds and sequence,
/// 0-0 for an id that is not one), and the [`Event`] it records.
pub(in crate::store) fn stream_event(id: &str, fields: Vec<(Entry, Entry)>) -> ((u64, u64), Event) {
    let place = id
        .split_once('-')
        .and_then(|(ms, seq)| Some((ms.parse().ok()?, seq.parse().ok()?)))
        .unwrap_or_default();
    let event = Event {
        at_ms: i64::try_from(place.0).unwrap_or_default(),
        fields: readable_record(fields),
    };
    (place, event)
}
