-- Plans the fires of several jobs into the due set, fenced: nothing is written unless this
-- replica still holds the leader lease with the epoch it acquired. One call plans many jobs, so
-- a tick over 100,000 schedules costs a few round trips, not one per job.
--
-- KEYS[1] leader         string  "<replica id>:<epoch>" of the current leader
-- KEYS[2] due            zset    run id -> due ms
-- KEYS[3] cursor         hash    job -> fire ms of the last fire planned or skipped
-- KEYS[4] events         stream  run state changes
-- KEYS[5] wake-promoter  channel told when a run becomes due earlier than anything before it
-- KEYS[6] planned        hash    job -> its fires planned and not promoted yet, ms, comma-separated
-- KEYS[7] hold  string  set while the namespace is held (redcron hold): nothing is written
-- KEYS[8] planned-through string  ms up to which every job's fires are planned (promote_due.lua
--                         lets `run-once` run a missed fire as the latest only past it)
-- ARGV[1] leader token "<replica id>:<epoch>"
-- ARGV[2] events stream MAXLEN (approximate), ' archive' after it when the namespace archives
-- ARGV[3] ms up to which every job's fires are planned once this call's plans are written, or
--         '' to leave it (a call that is not the last of its tick)
-- ARGV[4..] one group per job: job name, the cursor ms the plan continues from (as the leader
--           last read or wrote it), new cursor ms (only ever moves forward), P, S, then P
--           triples of runs to plan (run id, fire ms, due ms = fire + jitter), then S pairs of
--           fires skipped without running (run id, reason)
--
-- Returns {'OK', runs added}, {'FENCED', current leader token or ''}, or {'STALE', job} when a
-- job's cursor in Redis is behind the one its plan continues from: Redis lost planner writes
-- (a failover to a replica that had not received them, a restore) while the leader kept its
-- lease. Nothing is written then; the leader reads the cursors again and plans the lost fires.
-- Cost: O(P log N) for P runs planned in all, N runs due.
check_types('plan_fires', KEYS, {'string', 'zset', 'hash', 'stream', 'channel', 'hash',
  'hold', 'string'})
local leader, due, cursor, events, wake, planned = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local planned_through = KEYS[8]
-- The namespace's prefix, for the run hashes and the archive's outbox: the events key less its
-- own name (key_events).
local prefix = string.sub(events, 1, -#'events' - 1)
local token, history, through = ARGV[1], history_of(prefix, ARGV[2]), ARGV[3]
if not history then
  return redis.error_reply('ERR plan_fires: maxlen must be a number')
end
if through ~= '' and not tonumber(through) then
  return redis.error_reply('ERR plan_fires: planned-through must be a number or empty')
end

-- Checked whole before the first write: a malformed group must not leave a half-written plan.
local jobs, froms, cursors = {}, {}, {}
local i = 4
while i <= #ARGV do
  local from, new_cursor = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local runs, skips = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  if not from or not new_cursor or not runs or not skips then
    return redis.error_reply('ERR plan_fires: cursors and counts must be numbers')
  end
  jobs[#jobs + 1], froms[#froms + 1], cursors[#cursors + 1] = ARGV[i], from, new_cursor
  i = i + 5 + runs * 3 + skips * 2
end
if i ~= #ARGV + 1 then
  return redis.error_reply('ERR plan_fires: a job group is cut short')
end

local holder = redis.call('GET', leader)
if holder ~= token then
  return {'FENCED', holder or ''}
end
if #jobs == 0 then
  if through ~= '' then
    redis.call('SET', planned_through, through)
  end
  return {'OK', 0}
end
local current = redis.call('HMGET', cursor, unpack(jobs))
for index, job in ipairs(jobs) do
  local before = tonumber(current[index])
  if before and before < froms[index] then
    return {'STALE', job}
  end
end

local earliest_before = tonumber(redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')[2])
local added, earliest_added = 0, nil
local new_fires = {}  -- job -> fires added by this call
i = 4
while i <= #ARGV do
  local job, runs, skips = ARGV[i], tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  i = i + 5
  for _ = 1, runs do
    local run_id, fire_ms, due_ms = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    -- A deterministic id makes planning the same fire twice a no-op.
    if redis.call('ZADD', due, 'NX', due_ms, run_id) == 1 then
      new_fires[job] = new_fires[job] or {}
      table.insert(new_fires[job], fire_ms)
      added = added + 1
      local due_number = tonumber(due_ms)
      if not earliest_added or due_number < earliest_added then
        earliest_added = due_number
      end
    end
    i = i + 3
  end
  for _ = 1, skips do
    record_event(events, history, ARGV[i], 'skipped', 'job', job, 'reason', ARGV[i + 1])
    i = i + 2
  end
end

-- Cursors only move forward.
local moved = {}
for index, job in ipairs(jobs) do
  local before = tonumber(current[index])
  if not before or cursors[index] > before then
    moved[#moved + 1] = job
    moved[#moved + 1] = string.format('%d', cursors[index])
  end
end
in_slices('HSET', cursor, moved)

local planned_jobs = {}
for job in pairs(new_fires) do
  planned_jobs[#planned_jobs + 1] = job
end
if #planned_jobs > 0 then
  local lists = redis.call('HMGET', planned, unpack(planned_jobs))
  local updates = {}
  for index, job in ipairs(planned_jobs) do
    local list = table.concat(new_fires[job], ',')
    if lists[index] and lists[index] ~= '' then
      list = lists[index] .. ',' .. list
    end
    updates[#updates + 1] = job
    updates[#updates + 1] = list
  end
  in_slices('HSET', planned, updates)
end
if through ~= '' then
  redis.call('SET', planned_through, through)
end
if earliest_added and (not earliest_before or earliest_added < earliest_before) then
  redis.call('PUBLISH', wake, string.format('%d', earliest_added))
end
return {'OK', added}
