-- Takes the overlap lock of a run claimed ahead of its due time while its job was busy (see
-- claim_runs.lua), now that the time has come: the run that held the lock may have ended since.
-- When the job is still busy, the run is skipped as an overlap, as it would have been had it
-- been claimed at its due time.
--
-- KEYS[1] active  zset    run id -> lease deadline ms
-- KEYS[2] events  stream  run state changes
-- ARGV[1] key prefix "{ns}:" for run:<id>, busy:<job>
-- ARGV[2] run id
-- ARGV[3] worker id that claimed it
-- ARGV[4] lease, ms: how long the lock lives unless extended with the lease
-- ARGV[5] events stream MAXLEN (approximate)
-- ARGV[6] retention of finished run hashes, ms
-- ARGV[7] now override, ms, or '' for Redis's clock (tests only)
--
-- Returns 'TAKEN' (start the run), 'BUSY' (skipped as an overlap) or 'GONE' (the run is no longer
-- this worker's: it was reaped).
-- Cost: O(log N).
local active, events = KEYS[1], KEYS[2]
local prefix, run_id, worker = ARGV[1], ARGV[2], ARGV[3]
local lease, maxlen, retention = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if not lease or not maxlen or not retention then
  return redis.error_reply('ERR take_overlap_lock: lease, maxlen and retention must be numbers')
end
local now = now_ms(ARGV[7])
local run_key = prefix .. 'run:' .. run_id

local holder, job, state = unpack(redis.call('HMGET', run_key, 'worker', 'job', 'state'))
if holder ~= worker or state ~= 'active' or not job or not redis.call('ZSCORE', active, run_id) then
  return 'GONE'
end
local busy = prefix .. 'busy:' .. job
if redis.call('SET', busy, run_id, 'NX', 'PX', lease) or redis.call('GET', busy) == run_id then
  return 'TAKEN'
end
redis.call('ZREM', active, run_id)
skip_run(run_key, run_id, job, 'overlap', now, retention, events, maxlen)
return 'BUSY'
