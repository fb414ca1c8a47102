-- Plans the fires of several jobs into the due set, fenced: nothing is written unless this
-- replica still holds the leader lease with the epoch it acquired. One call plans many jobs, so
-- a tick over 100,000 schedules costs a few round trips, not one per job.
--
-- KEYS[1] leader         string  "<replica id>:<epoch>" of the current leader
-- KEYS[2] due            zset    run id -> due ms
-- KEYS[3] cursor         hash    job -> fire ms of the last fire planned or skipped
-- KEYS[4] events         stream  run state changes
-- KEYS[5] wake-promoter  channel told when a run becomes due earlier than anything before it
-- ARGV[1] leader token "<replica id>:<epoch>"
-- ARGV[2] key prefix "{ns}:" for planned:<job> (zset: the job's planned run ids -> fire ms)
-- ARGV[3] events stream MAXLEN (approximate)
-- ARGV[4..] one group per job: job name, new cursor ms (only ever moves forward), P, S, then P
--           triples of runs to plan (run id, fire ms, due ms = fire + jitter), then S pairs of
--           fires skipped without running (run id, reason)
--
-- Returns {'OK', runs added} or {'FENCED', current leader token or ''}.
-- Cost: O(P log N) for P runs planned in all, N runs due.
local leader, due, cursor, events, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local token, prefix, maxlen = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not maxlen then
  return redis.error_reply('ERR plan_fires: maxlen must be a number')
end

-- Checked whole before the first write: a malformed group must not leave a half-written plan.
local jobs, cursors = {}, {}
local i = 4
while i <= #ARGV do
  local new_cursor, runs, skips = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  if not new_cursor or not runs or not skips then
    return redis.error_reply('ERR plan_fires: cursor and counts must be numbers')
  end
  jobs[#jobs + 1], cursors[#cursors + 1] = ARGV[i], new_cursor
  i = i + 4 + runs * 3 + skips * 2
end
if i ~= #ARGV + 1 then
  return redis.error_reply('ERR plan_fires: a job group is cut short')
end

local holder = redis.call('GET', leader)
if holder ~= token then
  return {'FENCED', holder or ''}
end
if #jobs == 0 then
  return {'OK', 0}
end

local earliest_before = tonumber(redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')[2])
local added, earliest_added = 0, nil
i = 4
while i <= #ARGV do
  local job, runs, skips = ARGV[i], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local planned = prefix .. 'planned:' .. job
  i = i + 4
  for _ = 1, runs do
    local run_id, fire_ms, due_ms = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    -- A deterministic id makes planning the same fire twice a no-op.
    if redis.call('ZADD', due, 'NX', due_ms, run_id) == 1 then
      redis.call('ZADD', planned, fire_ms, run_id)
      added = added + 1
      local due_number = tonumber(due_ms)
      if not earliest_added or due_number < earliest_added then
        earliest_added = due_number
      end
    end
    i = i + 3
  end
  for _ = 1, skips do
    record_event(events, maxlen, ARGV[i], 'skipped', 'job', job, 'reason', ARGV[i + 1])
    i = i + 2
  end
end

-- Cursors only move forward.
local current = redis.call('HMGET', cursor, unpack(jobs))
local moved = {}
for index, job in ipairs(jobs) do
  local before = tonumber(current[index])
  if not before or cursors[index] > before then
    moved[#moved + 1] = job
    moved[#moved + 1] = string.format('%d', cursors[index])
  end
end
if #moved > 0 then
  redis.call('HSET', cursor, unpack(moved))
end
if earliest_added and (not earliest_before or earliest_added < earliest_before) then
  redis.call('PUBLISH', wake, string.format('%d', earliest_added))
end
return {'OK', added}
