-- Extends a running run's lease (and its slot in its job's limit), for the worker that holds it only.
--
-- KEYS[1] active  zset  run id -> lease deadline ms
-- ARGV[1] key prefix "{ns}:" for run:<id>, running:<job>
-- ARGV[2] run id
-- ARGV[3] worker id that claimed it
-- ARGV[4] lease, ms from now
-- ARGV[5] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[6] 1 when the worker starts the run (claimed ahead) with this extension: its start is
--         recorded as now; 0 otherwise
--
-- Returns 1 when extended, 0 when the run is no longer this worker's (its lease expired and it
-- was reaped): the worker should stop it.
-- Cost: O(log N).
local active = KEYS[1]
local prefix, run_id, worker, lease = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms(ARGV[5])
local run_key = key_run(prefix, run_id)

local holder, job = unpack(redis.call('HMGET', run_key, 'worker', 'job'))
if holder ~= worker or not redis.call('ZSCORE', active, run_id) then
  return 0
end
redis.call('ZADD', active, 'XX', now + lease, run_id)
if ARGV[6] == '1' then
  redis.call('HSET', run_key, 'started_ms', now)
  redis.call('HDEL', run_key, 'starting')
end
-- XX: a job without a limit keeps no slots, and a slot is never created here.
redis.call('ZADD', key_running(prefix, job), 'XX', now + lease, run_id)
return 1
