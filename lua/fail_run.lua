#!lua flags=allow-oom
-- Records a run's failure and decides what becomes of it: back to the due set after an
-- exponential, jittered, capped backoff while attempts are left (retrying), else the dead
-- letters. Also how a replica that shuts down hands its runs back (reason 'interrupted' for a
-- run stopped mid-run, which an at-most-once job must not run again, so it is dead; reason
-- 'not-started' for a run claimed ahead and never started, or claimed by a replica that does not
-- declare its job, due again at once or at its due time if later), and
-- how the reaper ends runs whose worker died (reason 'lost'): an at-least-once run is run again
-- at once, up to MAX_LOST times, an at-most-once run is dead. Neither uses up an attempt: the
-- command did not fail, its worker went away.
--
-- A run whose command had started and is due again at once (interrupted or lost) goes straight
-- to the head of its ready list, not to the due set: it is older than every run waiting there
-- (its fire came first, and it was started already), and it is not judged again, so nothing is
-- left for promote_due.lua to do. From the due set it would be pushed behind the newer runs
-- already ready, which in a replica's own route (an every-replica job) start first: a replica
-- back from a restart would run its late fires newest first, and the old one last, making the
-- fires due while it runs overlaps.
--
-- Redis runs it even out of memory (the flags line, allow-oom): a worker's outcome or
-- hand-back costs a few bytes for each run that ran, and one refused would leave the run's
-- lease to expire; the reaper ends only leases that expired, which workers keep extending
-- while Redis refuses other writes (extend_lease.lua).
--
-- KEYS[1] active         zset    run id -> lease deadline ms
-- KEYS[2] due            zset    run id -> due ms, of cron fires (an ad-hoc run's retry goes to
--                                due-runs, built from the prefix)
-- KEYS[3] dead           zset    run id -> ms it died
-- KEYS[4] events         stream  run state changes
-- KEYS[5] wake-promoter  channel told when a retry becomes due
-- KEYS[6] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for run:<id>, running:<job>, waiting:<job>, ready:<queue>:<priority>,
--         ready-fires:<queue>:<priority>, wake:<queue>, ready-queues, due-runs
-- ARGV[2] run id
-- ARGV[3] worker id that claimed it, or '' for the reaper (then the lease must have expired)
-- ARGV[4] reason: failed | timeout | permanent (no retry) | corrupt (no retry) | lost |
--         interrupted | not-started
-- ARGV[5] error message
-- ARGV[6] exit code, or ''
-- ARGV[7] tail of the output
-- ARGV[8] jitter in [0, 1): the retry delay is backoff * (1 + jitter) / 2
-- ARGV[9] events stream MAXLEN (approximate), ' archive' after it when the namespace archives
-- ARGV[10] now override, ms, or '' for Redis's clock (tests only)
--
-- Returns {'RETRYING', due ms} (now, for a run made ready at once), {'DEAD', ms}, or {'GONE', 0}
-- when the run is no longer active for this worker (or, for the reaper, its lease was extended
-- meanwhile).
-- Cost: O(log N).
check_types('fail_run', KEYS, {'zset', 'zset', 'zset', 'stream', 'channel', 'hold'})
local active, due, dead, events, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, run_id, worker, reason = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local message, exit_code, output = ARGV[5], ARGV[6], ARGV[7]
local jitter, history = tonumber(ARGV[8]), history_of(prefix, ARGV[9])
if not jitter or not history then
  return redis.error_reply('ERR fail_run: jitter must be a number, history a maxlen')
end
local now = now_ms(ARGV[10])
-- A run whose worker died this many times is taken for a poison run and sent to the dead letters.
local MAX_LOST = 3
local run_key = key_run(prefix, run_id)

local deadline = tonumber(redis.call('ZSCORE', active, run_id))
local holder, job, attempt, max_attempts, backoff, max_backoff, delivery, due_ms, started, notify,
  notify_on, kind, starting, queue, priority = unpack(checked_read('fail_run', run_key, 'hash',
    'HMGET', 'worker', 'job', 'attempt', 'max_attempts', 'backoff_ms', 'max_backoff_ms',
    'delivery', 'due_ms', 'started_ms', 'notify', 'notify_on', 'kind', 'starting', 'queue',
    'priority'))
if not deadline or (worker == '' and deadline > now) or (worker ~= '' and holder ~= worker) then
  return {'GONE', 0}
end
if job then
  check_job_keys('fail_run', prefix, slot_name(job, run_id))
  check_type('fail_run', key_dead_jobs(prefix), 'hash')
end
-- The ready list a started run stopped or lost goes back to, if it runs again (one whose
-- routing was damaged goes by the due set, where promote_due.lua buries it as corrupt).
local rerun_list
if (reason == 'interrupted' or reason == 'lost') and delivery ~= 'at-most-once'
    and starting ~= '1' and routable(queue, priority) then
  rerun_list = ready_list(prefix, kind, queue, priority)
  check_type('fail_run', rerun_list, 'list')
  check_type('fail_run', key_wake(prefix, queue), 'zset')
end
redis.call('ZREM', active, run_id)
if job then
  free_job_slot(prefix, slot_name(job, run_id), run_id, now)
end
redis.call('HSET', run_key, 'error', message, 'exit_code', exit_code, 'output', output,
  'reason', reason, 'finished_ms', now)

attempt, max_attempts = tonumber(attempt) or 1, tonumber(max_attempts) or 1
-- What this attempt did, in its event: the run's hash keeps only its last attempt's. A run
-- handed back before it started ran nothing.
local ran, ran_output = {}, nil
if reason ~= 'not-started' then
  -- Its output, for the archive's record only (the event does not carry it).
  ran_output = output
end
if reason ~= 'not-started' and tonumber(started) then
  ran = {'started_ms', started, 'duration_ms', now - tonumber(started), 'exit_code', exit_code}
end
local retry_at
if reason == 'not-started'
    or (reason == 'interrupted' and delivery ~= 'at-most-once')
    or (reason == 'lost' and delivery ~= 'at-most-once'
      and redis.call('HINCRBY', run_key, 'lost', 1) <= MAX_LOST) then
  redis.call('HSET', run_key, 'attempt', math.max(attempt - 1, 0))
  -- Only a fire that never started is judged at its start (missed_at_start in common.lua): one
  -- whose command had started and was stopped or lost runs again however late, as a retry
  -- would. A run claimed ahead and handed back before its start (`starting`) is still judged.
  if reason ~= 'not-started' and starting ~= '1' then
    redis.call('HDEL', run_key, 'missed_after_ms', 'misfire')
  end
  -- A run claimed ahead and never started is due again at its own time, not before.
  retry_at = reason == 'not-started' and math.max(now, tonumber(due_ms) or now) or now
elseif (reason == 'failed' or reason == 'timeout') and attempt < max_attempts
    -- Written into every run from its definition: a run without them was damaged, and goes to
    -- the dead letters (where it can be re-driven) rather than retry on a made-up backoff.
    and tonumber(backoff) and tonumber(max_backoff) then
  local delay = math.min(tonumber(backoff) * 2 ^ (attempt - 1), tonumber(max_backoff))
  retry_at = now + math.floor(delay * (1 + jitter) / 2)
end

-- Notices are told by the replica that recorded the outcome (none for the reaper's: any
-- replica then). A failing attempt that makes the run dead sends `dead` when the job asks for
-- both: one notice says it all.
local notifier = worker ~= '' and replica_of(worker) or nil
local command_failed = reason == 'failed' or reason == 'timeout' or reason == 'permanent'
local function notice(event)
  add_notice(prefix, run_key, run_id, event, now, notify, notify_on, notifier)
end
local function subscribed(event)
  return notify_on and string.find(notify_on, ',' .. event .. ',', 1, true)
end

if retry_at and rerun_list then
  -- Ready, it has no worker until it is claimed again. Its queue may have been forgotten by the
  -- index while the run ran (its lists were empty).
  note_ready_queue(queue, prefix)
  redis.call('LPUSH', rerun_list, run_id)
  redis.call('ZADD', key_wake(prefix, queue), 0, 'ready')
  redis.call('HSET', run_key, 'state', 'ready', 'due_ms', retry_at, 'ready_ms', retry_at)
  redis.call('HDEL', run_key, 'worker')
elseif retry_at then
  -- A fire's retry waits among the fires, an ad-hoc run's among the ad-hoc runs: a backlog of
  -- them retried at once never holds back a fire's promotion.
  redis.call('ZADD', kind == 'cron' and due or key_due_runs(prefix), retry_at, run_id)
  redis.call('HSET', run_key, 'state', 'retrying', 'due_ms', retry_at)
end
if retry_at then
  record_outcome(events, history, run_id, 'retrying', ran_output, 'job', job or '', 'reason', reason,
    'attempt', attempt, 'worker', holder or '', 'due_ms', retry_at, 'error', message, unpack(ran))
  redis.call('PUBLISH', wake, retry_at)
  if command_failed then
    notice('failed')
  end
  if output ~= '' and reason ~= 'not-started' then
    notice('output')
  end
  return {'RETRYING', retry_at}
end
redis.call('ZADD', dead, now, run_id)
redis.call('HSET', run_key, 'state', 'dead')
-- A dead workflow step fails its instance, or lets it go on (on_failure), in this same call.
workflow_step_ended(prefix, run_key, 'failed', '', now)
record_outcome(events, history, run_id, 'dead', ran_output, 'job', job or '', 'reason', reason,
  'attempt', attempt, 'worker', holder or '', 'error', message, unpack(ran))
if subscribed('dead') then
  notice('dead')
elseif command_failed then
  notice('failed')
end
if output ~= '' and reason ~= 'not-started' then
  notice('output')
end
if job and subscribed('recovered') then
  redis.call('HSET', key_dead_jobs(prefix), job, run_id)
end
return {'DEAD', now}
