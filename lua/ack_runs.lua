#!lua flags=allow-oom
-- Records the success of several runs at once: drops each one's lease, frees its slot in its
-- job's limit (handing it to a run waiting for one), keeps its outcome for `retention` ms.
-- Workers of a replica share one call per batch of finished runs, so acks cost one round trip
-- per batch rather than per run. A run that is a workflow step marks its step and enqueues the
-- steps that may now start (include/workflows.lua), in the same call.
--
-- Redis runs it even out of memory (the flags line, allow-oom): an outcome costs a few bytes
-- for each run that ran, and one refused would leave the run's lease to expire, and the run
-- to run again.
--
-- KEYS[1] active  zset    run id -> lease deadline ms
-- KEYS[2] events  stream  run state changes
-- KEYS[3] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for run:<id>, running:<job>, waiting:<job>, ready:..., wake:<queue>,
--         ready-queues
-- ARGV[2] retention of the run hashes, ms
-- ARGV[3] events stream MAXLEN (approximate), ' archive' after it when the namespace archives
-- ARGV[4] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[5..] groups of 5, one per run: run id, worker id that claimed it, the attempt it ran,
--           exit code ('' for a handler without one), tail of the output
--
-- Returns one number per run, in order: 1 when recorded, 0 when that attempt is no longer that
-- worker's (its lease expired and it was reaped, so it will run again or is dead as lost).
-- Cost: O(runs log N).
check_types('ack_runs', KEYS, {'zset', 'stream', 'hold'})
local active, events = KEYS[1], KEYS[2]
local prefix, retention, history = ARGV[1], tonumber(ARGV[2]), history_of(ARGV[1], ARGV[3])
if not retention or not history or (#ARGV - 4) % 5 ~= 0 then
  return redis.error_reply('ERR ack_runs: retention must be a number, history a maxlen, runs come in groups of 5')
end
local now = now_ms(ARGV[4])
local now_text = tostring(now)
-- Read before any write: moved at the end when a success is recorded (see claim_runs.lua), so
-- that a Redis restored from a copy made before it is seen as older.
local rewind = key_rewind(prefix)
local written = tonumber(checked_read('ack_runs', rewind, 'hash', 'HGET', 'written_ms')) or 0

-- Every run is read, and the keys its success writes checked, before the first write: a damaged
-- key must not fail the call after some runs of the batch were recorded.
local runs, checked_jobs, notices_checked = {}, {}, false
for i = 5, #ARGV, 5 do
  local run_key = key_run(prefix, ARGV[i])
  local fields = checked_read('ack_runs', run_key, 'hash', 'HMGET', 'state', 'worker', 'attempt',
    'job', 'started_ms', 'overlap', 'max_concurrency', 'notify', 'notify_on', 'reason', 'error',
    'workflow', 'step')
  local job = fields[4]
  local slots = job and slot_name(job, ARGV[i])
  if job and not checked_jobs[slots] and job_limit(fields[6], fields[7]) then
    checked_jobs[slots] = true
    check_job_keys('ack_runs', prefix, slots)
  end
  if fields[8] and not notices_checked then
    notices_checked = true
    check_type('ack_runs', key_dead_jobs(prefix), 'hash')
  end
  runs[#runs + 1] = fields
end

-- The runs recorded by this call: their states were read before it recorded any, so a second
-- ack of one in the same batch is told by this set, not by its state.
local recorded, finished, acked = {}, {}, {}
for i = 5, #ARGV, 5 do
  local run_id, worker, attempt, exit_code, output = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local run_key = key_run(prefix, run_id)
  local state, holder, held_attempt, job, started, overlap, max_concurrency, notify, notify_on,
    failed_reason, failed_error, workflow_id, step = unpack(runs[(i - 5) / 5 + 1], 1, 13)
  -- The attempt tells a reaped run claimed again by the same worker from the one it ran.
  if state ~= 'active' or holder ~= worker or held_attempt ~= attempt or acked[run_id] then
    recorded[#recorded + 1] = 0
  else
    acked[run_id] = true
    if job and job_limit(overlap, max_concurrency) then
      free_job_slot(prefix, slot_name(job, run_id), run_id, now)
    end
    redis.call('HSET', run_key, 'state', 'succeeded', 'finished_ms', now_text, 'exit_code', exit_code,
      'output', output)
    -- The hash holds its last attempt's outcome: an earlier attempt's failure or loss is in
    -- the events, not beside a success. Only a run that had one pays the command.
    if failed_reason or failed_error then
      redis.call('HDEL', run_key, 'reason', 'error')
    end
    expire_finished_run(run_key, retention, history)
    record_outcome(events, history, run_id, 'succeeded', output, 'job', job or '', 'worker', worker,
      'attempt', attempt, 'exit_code', exit_code, 'started_ms', started or '',
      'duration_ms', now - (tonumber(started) or now))
    recorded[#recorded + 1] = 1
    finished[#finished + 1] = run_id
    -- A workflow step's next steps are enqueued in this same call; whether it is one was read
    -- with the rest of the run.
    workflow_step_ended(prefix, run_key, 'succeeded', output, now, {workflow_id, step})
    if notify then
      -- The first success after a dead run tells that the job recovered.
      if job and string.find(notify_on or '', ',recovered,', 1, true)
          and redis.call('HDEL', key_dead_jobs(prefix), job) == 1 then
        add_notice(prefix, run_key, run_id, 'recovered', now, notify, notify_on, replica_of(worker))
      end
      if output ~= '' then
        add_notice(prefix, run_key, run_id, 'output', now, notify, notify_on, replica_of(worker))
      end
    end
  end
end
in_slices('ZREM', active, finished)
if #finished > 0 then
  redis.call('HSET', rewind, 'written_ms', math.max(written, now))
end
return recorded
