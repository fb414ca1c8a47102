-- Records a run's success: drops its lease, releases its overlap lock, keeps its outcome for
-- `retention` ms.
--
-- KEYS[1] active  zset    run id -> lease deadline ms
-- KEYS[2] events  stream  run state changes
-- ARGV[1] key prefix "{ns}:" for run:<id>, busy:<job>
-- ARGV[2] run id
-- ARGV[3] worker id that claimed it
-- ARGV[4] exit code ('' for a handler without one)
-- ARGV[5] tail of the output
-- ARGV[6] retention of the run hash, ms
-- ARGV[7] events stream MAXLEN (approximate)
-- ARGV[8] now override, ms, or '' for Redis's clock (tests only)
--
-- Returns 1 when recorded, 0 when the run is no longer this worker's (its lease expired and it
-- was reaped, so it will run again or is dead as lost).
-- Cost: O(log N).
local active, events = KEYS[1], KEYS[2]
local prefix, run_id, worker, exit_code, output = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local retention, maxlen = tonumber(ARGV[6]), tonumber(ARGV[7])
local now = now_ms(ARGV[8])
local run_key = prefix .. 'run:' .. run_id

local holder, job, started = unpack(redis.call('HMGET', run_key, 'worker', 'job', 'started_ms'))
if holder ~= worker or redis.call('ZREM', active, run_id) == 0 then
  return 0
end
local busy = prefix .. 'busy:' .. job
if redis.call('GET', busy) == run_id then
  redis.call('DEL', busy)
end
redis.call('HSET', run_key, 'state', 'succeeded', 'finished_ms', now, 'exit_code', exit_code,
  'output', output)
redis.call('PEXPIRE', run_key, retention)
record_event(events, maxlen, run_id, 'succeeded', 'job', job, 'exit_code', exit_code,
  'duration_ms', now - (tonumber(started) or now))
return 1
