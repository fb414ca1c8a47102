-- Takes a slot of the job of a run claimed ahead of its due time while every slot was taken
-- (see claim_runs.lua), now that the time has come: a run that held one may have ended since.
-- When none is free, the run is skipped as an overlap if it may be (a cron fire of a `forbid`
-- job, claimed for the first time, while a run of its job that had started by its due time
-- still runs), and otherwise waits for a slot (waiting:<job>) without using its attempt: as it
-- would have been had it been claimed at its due time. Before either, a cron fire's first
-- attempt that starts later than the misfire threshold (its worker was held up past its due
-- time), or after its job's next fire for the same target came due, is judged again by its
-- job's policy (missed_at_start in common.lua) and skipped as `missed` when the policy says so.
--
-- KEYS[1] active  zset    run id -> lease deadline ms
-- KEYS[2] events  stream  run state changes
-- KEYS[3] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for run:<id>, running:<job>, waiting:<job>, ready:..., wake:<queue>,
--         ready-queues,
--         latest-fire
-- ARGV[2] run id
-- ARGV[3] worker id that claimed it
-- ARGV[4] lease, ms: how long the run and its slot are held unless extended
-- ARGV[5] events stream MAXLEN (approximate), ' archive' after it when the namespace archives
-- ARGV[6] retention of finished run hashes, ms
-- ARGV[7] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[8] 1 when the run may be skipped as an overlap, 0 when it waits for a slot instead
--
-- Returns 'TAKEN' (start the run), 'BUSY' (skipped as an overlap), 'MISSED' (skipped as a missed
-- fire), 'WAITING' (put aside until a
-- slot is free) or 'GONE' (the run is no longer this worker's: it was reaped, or its short lease
-- expired before it could start, as extend_lease.lua refuses too: the reaper hands it back and
-- the promoter judges it as a late fire).
-- Cost: O(log N) plus the runs handed freed slots.
check_types('take_job_slot', KEYS, {'zset', 'stream', 'hold'})
local active, events = KEYS[1], KEYS[2]
local prefix, run_id, worker = ARGV[1], ARGV[2], ARGV[3]
local lease, history, retention = tonumber(ARGV[4]), history_of(prefix, ARGV[5]), tonumber(ARGV[6])
local may_skip = ARGV[8] == '1'
if not lease or not history or not retention then
  return redis.error_reply('ERR take_job_slot: lease, maxlen and retention must be numbers')
end
local now = now_ms(ARGV[7])
local run_key = key_run(prefix, run_id)

local holder, job, state, attempt, due_ms, overlap, max_concurrency, kind, fire_ms, redriven,
  missed_after, misfire, next_due = unpack(checked_read('take_job_slot', run_key, 'hash', 'HMGET',
  'worker', 'job', 'state', 'attempt', 'due_ms', 'overlap', 'max_concurrency', 'kind', 'fire_ms',
  'redriven_ms', 'missed_after_ms', 'misfire', 'next_due_ms'))
local deadline = tonumber(redis.call('ZSCORE', active, run_id))
if holder ~= worker or state ~= 'active' or not job or not deadline or deadline < now then
  return 'GONE'
end
-- Counted per replica for an every-replica job's run (slot_name).
local slot_group = slot_name(job, run_id)
check_job_keys('take_job_slot', prefix, slot_group)
check_type('take_job_slot', key_latest_fires(prefix), 'hash')
local slots = job_limit(overlap, max_concurrency)
local running = key_running(prefix, slot_group)
-- The claim counted the attempt this start would use: the first is 1 here.
if missed_at_start(prefix, job, kind, tonumber(attempt) == 1, redriven, fire_ms, missed_after,
    misfire, next_due, now) then
  redis.call('ZREM', active, run_id)
  redis.call('HSET', run_key, 'attempt', 0)
  redis.call('HDEL', run_key, 'worker', 'started_ms', 'starting')
  skip_run(prefix, run_key, run_id, job, 'missed', now, retention, events, history)
  return 'MISSED'
end
fill_job_slots(prefix, slot_group, now)
if not slots or redis.call('ZSCORE', running, run_id)
    or not job_slots_full(prefix, slot_group, running, slots) then
  if slots then
    redis.call('ZADD', running, now + lease, run_id)
  end
  -- The run starts now: its full lease, and its real start.
  redis.call('ZADD', active, 'XX', now + lease, run_id)
  redis.call('HSET', run_key, 'started_ms', now)
  redis.call('HDEL', run_key, 'starting')
  return 'TAKEN'
end
redis.call('ZREM', active, run_id)
-- Not started: the claim's attempt, worker and start are taken back, whether the run is
-- skipped (it never ran an attempt) or waits.
redis.call('HSET', run_key, 'attempt', math.max((tonumber(attempt) or 1) - 1, 0))
redis.call('HDEL', run_key, 'worker', 'started_ms')
if may_skip and running_since(prefix, running, tonumber(due_ms) or now) then
  skip_run(prefix, run_key, run_id, job, 'overlap', now, retention, events, history)
  return 'BUSY'
end
wait_for_slot(prefix, run_key, run_id, slot_group)
return 'WAITING'
