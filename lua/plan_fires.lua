-- Plans one job's fires into the due set, fenced: nothing is written unless this replica still
-- holds the leader lease with the epoch it acquired.
--
-- KEYS[1] leader         string  "<replica id>:<epoch>" of the current leader
-- KEYS[2] due            zset    run id -> due ms
-- KEYS[3] cursor         hash    job -> fire ms of the last fire planned or skipped
-- KEYS[4] planned:<job>  zset    this job's planned run ids -> fire ms
-- KEYS[5] events         stream  run state changes
-- KEYS[6] wake-promoter  channel told when a run becomes due earlier than anything before it
-- ARGV[1] leader token "<replica id>:<epoch>"
-- ARGV[2] job name
-- ARGV[3] new cursor, ms: only ever moves forward
-- ARGV[4] events stream MAXLEN (approximate)
-- ARGV[5] P, how many runs to plan; then P triples: run id, fire ms, due ms (fire + jitter);
--         then pairs of fires skipped without running: run id, reason
--
-- Returns {'OK', runs added} or {'FENCED', current leader token or ''}.
-- Cost: O(P log N) for P runs planned, N runs due.
local leader, due, cursor, planned, events, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, job, new_cursor, maxlen = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local count = tonumber(ARGV[5])
if not new_cursor or not maxlen or not count then
  return redis.error_reply('ERR plan_fires: cursor, maxlen and count must be numbers')
end

local holder = redis.call('GET', leader)
if holder ~= token then
  return {'FENCED', holder or ''}
end

local earliest_before = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')[2]
local added, earliest_added = 0, nil
for i = 0, count - 1 do
  local base = 6 + i * 3
  local run_id, fire_ms, due_ms = ARGV[base], ARGV[base + 1], tonumber(ARGV[base + 2])
  -- A deterministic id makes planning the same fire twice a no-op.
  if redis.call('ZADD', due, 'NX', due_ms, run_id) == 1 then
    redis.call('ZADD', planned, fire_ms, run_id)
    added = added + 1
    if not earliest_added or due_ms < earliest_added then
      earliest_added = due_ms
    end
  end
end
for i = 6 + count * 3, #ARGV, 2 do
  record_event(events, maxlen, ARGV[i], 'skipped', 'job', job, 'reason', ARGV[i + 1])
end

local current = tonumber(redis.call('HGET', cursor, job))
if not current or new_cursor > current then
  redis.call('HSET', cursor, job, new_cursor)
end
if earliest_added and (not earliest_before or earliest_added < tonumber(earliest_before)) then
  redis.call('PUBLISH', wake, earliest_added)
end
return {'OK', added}
