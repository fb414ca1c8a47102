-- Removes a job's planned, not yet promoted runs, fenced like plan_fires: used when a reload
-- changes or removes the job, so its old fires never run and the new schedule is planned from
-- now on.
--
-- KEYS[1] leader         string  "<replica id>:<epoch>" of the current leader
-- KEYS[2] due            zset    run id -> due ms
-- KEYS[3] cursor         hash    job -> fire ms of the last fire planned or skipped
-- KEYS[4] planned        hash    job -> its fires planned and not promoted yet, ms, comma-separated
-- KEYS[5] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] leader token "<replica id>:<epoch>"
-- ARGV[2] job name
-- ARGV[3] new cursor, ms, or '' to forget the job's cursor (the job was removed)
--
-- Returns {'OK', runs removed} or {'FENCED', current leader token or ''}.
-- Cost: O(P log N) for P planned runs.
check_types('unplan_job', KEYS, {'string', 'zset', 'hash', 'hash', 'hold'})
local leader, due, cursor, planned = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, job, new_cursor = ARGV[1], ARGV[2], ARGV[3]

local holder = redis.call('GET', leader)
if holder ~= token then
  return {'FENCED', holder or ''}
end
local removed = 0
for _, fire in ipairs(planned_fires(redis.call('HGET', planned, job))) do
  removed = removed + redis.call('ZREM', due, cron_run_id(job, fire))
end
redis.call('HDEL', planned, job)
-- The one place a cursor moves back: the old schedule's future fires are gone.
if new_cursor == '' then
  redis.call('HDEL', cursor, job)
else
  redis.call('HSET', cursor, job, new_cursor)
end
return {'OK', removed}
