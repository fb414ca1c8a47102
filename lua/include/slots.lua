-- A job's slots (its limit of runs at once) and when a fire is judged missed as it would start:
-- loaded after common.lua, whose helpers it uses, and before workflows.lua (see
-- src/store/scripts.rs).

-- How many runs of a job may run at once, from a run's `overlap` and `max_concurrency` fields:
-- 1 when the job forbids overlap, its max_concurrency, or nil for no limit (no slots are kept).
local function job_limit(overlap, max_concurrency)
  if overlap == 'forbid' then
    return 1
  end
  return tonumber(max_concurrency)
end

-- How long a run handed a freed slot of its job keeps it before being claimed: the slot goes
-- to the next waiting run after that (a run lost from its ready list must not hold it forever).
local SLOT_HANDOVER_MS = 60000

-- Whether every slot of a job (`running:<job>`, `limit` of them; `job` is the slot name, see
-- slot_name) is held by a run of the job that may hold one: running (`active`) or handed the slot (`ready`). An entry that is no such
-- run (no record, another job's run, a run that ended; written by something else or left by a
-- damaged record) is dropped first, or it would keep the job's runs waiting until its deadline,
-- or for ever with a far one. Entries are read only when the slots look full, so a free slot
-- costs nothing. Cost: O(limit) when full.
local function job_slots_full(prefix, job, running, limit)
  if redis.call('ZCARD', running) < limit then
    return false
  end
  for _, holder in ipairs(redis.call('ZRANGE', running, 0, -1)) do
    local holder_job, state = unpack(redis.call('HMGET', key_run(prefix, holder), 'job', 'state'))
    if not holder_job or slot_name(holder_job, holder) ~= job
        or (state ~= 'active' and state ~= 'ready') then
      redis.call('ZREM', running, holder)
    end
  end
  return redis.call('ZCARD', running) >= limit
end

-- Hands the free slots of a job (`running:<job>`, zset run id -> deadline ms) to the runs
-- waiting for one (`waiting:<job>`, a list, oldest first): each goes back to the head of its
-- ready list with the slot reserved for it, so waiting runs start in the order they came and
-- one at a time when the limit is 1. Slots whose deadline passed (a run whose replica died,
-- a handover never claimed) are freed first, and entries that are no run of the job holding a
-- slot are dropped (job_slots_full). Cost: O(log N) per run handed a slot.
local function fill_job_slots(prefix, job, now)
  local running, waiting = key_running(prefix, job), key_waiting(prefix, job)
  redis.call('ZREMRANGEBYSCORE', running, '-inf', now)
  while true do
    local run_id = redis.call('LINDEX', waiting, 0)
    if not run_id then
      return
    end
    local run_key = key_run(prefix, run_id)
    local state, kind, queue, priority, overlap, max_concurrency, run_job = unpack(redis.call(
      'HMGET', run_key, 'state', 'kind', 'queue', 'priority', 'overlap', 'max_concurrency', 'job'))
    local limit = job_limit(overlap, max_concurrency)
    if state == 'waiting' and queue and priority and limit
        and job_slots_full(prefix, job, running, limit) then
      return
    end
    redis.call('LPOP', waiting)
    -- An entry whose run is no longer waiting (ended elsewhere, damaged) is dropped; one whose
    -- routing was damaged while it waited is dead as corrupt, as promote_due.lua buries one
    -- coming due so, rather than pushed to a ready list no claim reads.
    if state == 'waiting' and not routable(queue, priority) then
      -- Named by its own job: `job` is the slot name, per replica for an every-replica job.
      bury_corrupt_run(prefix, run_key, run_id, run_job or job, now, key_dead(prefix),
        key_events(prefix), told_history)
    elseif state == 'waiting' then
      if limit then
        redis.call('ZADD', running, now + SLOT_HANDOVER_MS, run_id)
      end
      redis.call('HSET', run_key, 'state', 'ready', 'ready_ms', now)
      note_ready_queue(queue, prefix)
      redis.call('LPUSH', ready_list(prefix, kind, queue, priority), run_id)
      redis.call('ZADD', key_wake(prefix, queue), 0, 'ready')
    end
  end
end

-- Frees the slot a run held in its job's limit (it ended, failed, was reaped or handed back)
-- and hands it to the next waiting run.
local function free_job_slot(prefix, job, run_id, now)
  redis.call('ZREM', key_running(prefix, job), run_id)
  fill_job_slots(prefix, job, now)
end

-- Whether a run of the job in `running` had started by `due_ms` and is running still: what
-- makes a fire of an `overlap = "forbid"` job skipped. A run handed a slot but not yet claimed,
-- or one that started after the fire was due (late fires run one after another), does not count.
-- Nor does a run started before Redis was last found older than a replica had seen it
-- (`rewound_ms` in {ns}:rewind, see claim_runs.lua): Redis may have lost its end, and only its
-- replica knows; the fire waits for its slot, which that replica frees within seconds when the
-- run had ended, or the run frees when it ends.
local function running_since(prefix, running, due_ms)
  local rewound = tonumber(redis.call('HGET', key_rewind(prefix), 'rewound_ms')) or 0
  for _, run_id in ipairs(redis.call('ZRANGE', running, 0, -1)) do
    local state, started, starting = unpack(redis.call('HMGET', key_run(prefix, run_id), 'state',
      'started_ms', 'starting'))
    started = tonumber(started)
    -- A run claimed ahead that its worker has not started yet is not running.
    if state == 'active' and not starting and started and started <= due_ms
        and started >= rewound then
      return true
    end
  end
  return false
end

-- Whether a cron fire about to start now is a missed fire that its job's `misfire` policy skips.
-- promote_due.lua judges a fire when it becomes ready; one of a job at its limit may then wait
-- for a slot long past the threshold, so every start judges it again: a claim (claim_runs.lua,
-- which also starts the runs handed a freed slot by fill_job_slots) and a slot taken at the due
-- time (take_job_slot.lua). Only a fire that never started is judged: retries and re-driven
-- runs are due at another time than their fire, and fail_run.lua drops the bound of an attempt
-- that started and was handed back or lost (it runs again however late), keeping it for one
-- claimed ahead and handed back before its start. The run's `misfire` and `missed_after_ms` (its
-- due time, fire plus jitter, plus the replica's `--misfire-threshold`) are written when
-- promote_due makes the fire ready within the threshold; a `run-all` fire gets neither, nor
-- does the missed fire that `run-once` chose to run late when it became ready: those always
-- start.
--
-- A replica's run of an every-replica fire whose successor has come due for that replica
-- (`next_due_ms`: the due time of the same replica's run of the job's next fire, written by
-- note_next_due when that run was made) is superseded: `run-once` and `skip` both skip it,
-- within the threshold or not, so that a replica back from an outage runs the latest fire it
-- missed once rather than its whole backlog one after another. A run started before its
-- successor's due time is never judged so: on-time starts, and late ones on a loaded machine,
-- skip nothing. A fire of a job that runs once has no such bound (its late fires within the
-- threshold run one after another, as docs/semantics.md promises). Past the threshold, `skip` skips it;
-- `run-once` skips it when a later fire of its job has come due ({ns}:latest-fire), which runs
-- or was judged in its place, so that one late fire per outage at most starts.
local function missed_at_start(prefix, job, kind, first_attempt, redriven, fire_ms, missed_after,
    misfire, next_due, now)
  missed_after, fire_ms, next_due = tonumber(missed_after), tonumber(fire_ms), tonumber(next_due)
  if kind ~= 'cron' or not first_attempt or redriven or not missed_after or not fire_ms then
    return false
  end
  if (misfire == 'run-once' or misfire == 'skip') and next_due and next_due <= now then
    return true
  end
  if now <= missed_after then
    return false
  end
  if misfire == 'skip' then
    return true
  end
  local latest = tonumber(redis.call('HGET', key_latest_fires(prefix), job)) or 0
  return latest > fire_ms
end

-- Tells a replica's run of an every-replica job's previous fire (`previous_run_id`) when the
-- same replica's run of the fire after it comes due, as promote_due.lua makes that one:
-- missed_at_start skips it as superseded if it has not started by then. Only a run that may still start is written (a finished run's hash is left as
-- it ended, and an expired one is not made again); a key of another type is left alone, as a
-- run no claim can read. Cost: O(1).
local function note_next_due(prefix, previous_run_id, due_text)
  local run_key = key_run(prefix, previous_run_id)
  local state = redis.pcall('HGET', run_key, 'state')
  if state == 'ready' or state == 'waiting' or state == 'active' then
    redis.call('HSET', run_key, 'next_due_ms', due_text)
  end
end

-- Puts a run aside until a slot of its job is free (see fill_job_slots): neither skipped nor dead.
local function wait_for_slot(prefix, run_key, run_id, job)
  redis.call('HSET', run_key, 'state', 'waiting')
  redis.call('RPUSH', key_waiting(prefix, job), run_id)
end
