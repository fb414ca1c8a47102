#!lua flags=allow-oom
-- Extends a running run's lease (and its slot in its job's limit), for the worker that holds it only.
-- It declares every key it touches, so it runs while the namespace is held (`redcron hold`):
-- on a slot being migrated Redis runs it only where all of them are, and the runs of a held
-- namespace keep their leases.
--
-- Redis runs it even out of memory (the flags line, allow-oom): a lease rewritten costs no
-- memory, and one refused would expire under a worker that still runs the run, which the
-- reaper would then hand to another worker while the first still runs it.
--
-- KEYS[1] active        zset  run id -> lease deadline ms
-- KEYS[2] run:<id>      hash  the run
-- KEYS[3] running:<job> zset  run id -> deadline ms: the slots of the run's job, when it has a limit
-- ARGV[1] run id
-- ARGV[2] worker id that claimed it
-- ARGV[3] lease, ms from now
-- ARGV[4] now override, ms, or '' for Redis's clock (tests only)
--
-- A run claimed ahead is started by start_claimed_runs.lua, many in one call.
--
-- Returns 1 when extended, 0 when the run is no longer this worker's (its lease expired and it
-- was reaped): the worker should stop it.
-- Cost: O(log N).
check_types('extend_lease', KEYS, {'zset', 'hash', 'zset'})
local active, run_key, running = KEYS[1], KEYS[2], KEYS[3]
local run_id, worker, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms(ARGV[4])

local holder = redis.call('HGET', run_key, 'worker')
local deadline = tonumber(redis.call('ZSCORE', active, run_id))
if holder ~= worker or not deadline then
  return 0
end
redis.call('ZADD', active, 'XX', now + lease, run_id)
-- XX: a job without a limit keeps no slots, and a slot is never created here.
redis.call('ZADD', running, 'XX', now + lease, run_id)
return 1
