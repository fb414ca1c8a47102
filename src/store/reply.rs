//! The two ends of a script call: the KEYS and ARGV that go in, and the decoding of what comes
//! back. Each script's header says what it answers; the decoders here read answers in that
//! order and name the script's operation in every error, so a reply the scripts do not give is
//! a [`StoreError::Reply`] rather than a Redis error or a panic.

use redis::{FromRedisValue, Value};

use super::StoreError;

/// One call of a script: its KEYS, then its ARGV (see `Store::invoke_batched`).
pub(super) struct ScriptCall {
    pub(super) keys: Vec<String>,
    pub(super) args: Vec<String>,
}

/// A [`StoreError::Reply`] for `operation`.
pub(super) fn reply_error(operation: &'static str, detail: impl ToString) -> StoreError {
    StoreError::Reply {
        operation,
        detail: detail.to_string(),
    }
}

/// Whether Redis refused a command, alone, in a pipeline or in a script, for a key of another
/// type than it takes.
pub(super) fn wrong_type(error: &redis::RedisError) -> bool {
    error
        .clone()
        .into_server_errors()
        .is_some_and(|errors| errors.iter().any(|(_, error)| error.code() == "WRONGTYPE"))
}

/// Decodes a whole reply of `operation` as `T`.
pub(super) fn decode<T: FromRedisValue>(
    operation: &'static str,
    value: Value,
) -> Result<T, StoreError> {
    T::from_redis_value(value).map_err(|error| reply_error(operation, error))
}

/// A reply of many values, read front to back.
pub(super) struct Reply {
    operation: &'static str,
    values: std::vec::IntoIter<Value>,
}

impl Reply {
    /// The values `operation` answered.
    pub(super) fn new(operation: &'static str, values: Vec<Value>) -> Self {
        Self {
            operation,
            values: values.into_iter(),
        }
    }

    /// The next value, as `T`.
    pub(super) fn next<T: FromRedisValue>(&mut self) -> Result<T, StoreError> {
        let value = self.next_value()?;
        decode(self.operation, value)
    }

    /// The next value as it came.
    pub(super) fn next_value(&mut self) -> Result<Value, StoreError> {
        self.values
            .next()
            .ok_or_else(|| reply_error(self.operation, "reply too short"))
    }

    /// The next `count` values, each decoded by `read` (which sees only its own values):
    /// records of a fixed number of fields whose own errors are the caller's to handle.
    pub(super) fn records<R>(
        &mut self,
        count: u64,
        fields: usize,
        read: impl Fn(Vec<Value>) -> R,
    ) -> Result<Vec<R>, StoreError> {
        let mut records = Vec::new();
        for _ in 0..count {
            let values: Vec<Value> = self.values.by_ref().take(fields).collect();
            if values.len() < fields {
                return Err(reply_error(self.operation, "reply too short"));
            }
            records.push(read(values));
        }
        Ok(records)
    }

    /// The next `count` `job, reason` pairs of skipped runs.
    pub(super) fn skips(&mut self, count: u64) -> Result<Vec<(String, String)>, StoreError> {
        (0..count)
            .map(|_| Ok((self.next()?, self.next()?)))
            .collect()
    }

    /// Checks that nothing is left unread: a longer reply is one this version does not know.
    pub(super) fn finish(self) -> Result<(), StoreError> {
        match self.values.len() {
            0 => Ok(()),
            left => Err(reply_error(
                self.operation,
                format!("{left} values left unread"),
            )),
        }
    }
}

/// The answer of a write fenced by the leader's token: done, with what it did; refused, with
/// the token that leads now (empty when none does); or refused because Redis lost writes of
/// this leader, naming the job that showed it.
pub(super) enum FencedAnswer<T> {
    Done(T),
    Fenced(String),
    Stale(String),
}

impl<T: FromRedisValue> FromRedisValue for FencedAnswer<T> {
    fn from_redis_value(value: Value) -> Result<Self, redis::ParsingError> {
        let (status, detail): (String, Value) = FromRedisValue::from_redis_value(value)?;
        match status.as_str() {
            "OK" => Ok(FencedAnswer::Done(T::from_redis_value(detail)?)),
            "FENCED" => Ok(FencedAnswer::Fenced(
                Option::<String>::from_redis_value(detail)?.unwrap_or_default(),
            )),
            "STALE" => Ok(FencedAnswer::Stale(String::from_redis_value(detail)?)),
            other => Err(format!("status {other:?}").into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(value: &str) -> Value {
        Value::BulkString(value.as_bytes().to_vec())
    }

    #[test]
    fn a_reply_read_past_its_end_or_not_to_its_end_is_an_error_naming_the_operation() {
        let mut reply = Reply::new("claim_runs", vec![Value::Int(1)]);
        assert_eq!(reply.next::<u64>().expect("a number"), 1);
        let error = reply.next::<u64>().expect_err("nothing left");
        assert_eq!(
            error.to_string(),
            "claiming runs: Redis answered what redcron does not write: reply too short"
        );

        let reply = Reply::new("promote_due", vec![Value::Int(1)]);
        let error = reply.finish().expect_err("a value left");
        assert_eq!(
            error.to_string(),
            "promoting the runs due: Redis answered what redcron does not write: 1 values left \
             unread"
        );
    }

    #[test]
    fn skip_pairs_are_read_by_count() {
        let values = vec![text("a"), text("missed"), text("b"), text("overlap")];
        let mut reply = Reply::new("claim_runs", values);
        assert_eq!(
            reply.skips(1).expect("one pair"),
            vec![("a".to_owned(), "missed".to_owned())]
        );
        assert!(reply.skips(2).is_err(), "one pair and nothing more");
        let mut odd = Reply::new("promote_due", vec![text("a")]);
        assert!(odd.skips(1).is_err(), "half a pair is not a skip");
    }

    #[test]
    fn records_are_whole_or_the_reply_is_too_short() {
        let mut reply = Reply::new(
            "claim_runs",
            vec![Value::Int(1), Value::Int(2), Value::Int(3)],
        );
        let records = reply.records(1, 2, |values| values.len());
        assert_eq!(records.expect("one record"), vec![2]);
        assert!(reply.records(1, 2, |values| values.len()).is_err());
    }

    #[test]
    fn a_fenced_answer_is_done_or_names_the_leader() {
        let done: FencedAnswer<u64> =
            decode("plan_fires", Value::Array(vec![text("OK"), Value::Int(3)])).expect("OK");
        assert!(matches!(done, FencedAnswer::Done(3)));
        let fenced: FencedAnswer<u64> = decode(
            "plan_fires",
            Value::Array(vec![text("FENCED"), text("r2:7")]),
        )
        .expect("FENCED");
        assert!(matches!(fenced, FencedAnswer::Fenced(token) if token == "r2:7"));
        let nobody: FencedAnswer<u64> =
            decode("plan_fires", Value::Array(vec![text("FENCED"), Value::Nil])).expect("FENCED");
        assert!(matches!(nobody, FencedAnswer::Fenced(token) if token.is_empty()));
        let unknown = decode::<FencedAnswer<u64>>(
            "plan_fires",
            Value::Array(vec![text("MAYBE"), Value::Nil]),
        );
        assert!(unknown.is_err());
    }
}
