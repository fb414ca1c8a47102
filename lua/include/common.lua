-- Helpers shared by every script: prepended to each script when it is loaded (see
-- src/store/scripts.rs), so each .lua file stays one atomic operation.

-- Keys named after a run, job, queue, fingerprint or replica, under the namespace's `prefix`
-- ("{ns}:"): the same suffixes as src/store/keys.rs, which a test checks them against.
local function key_run(prefix, run_id) return prefix .. 'run:' .. run_id end
local function key_running(prefix, job) return prefix .. 'running:' .. job end
local function key_waiting(prefix, job) return prefix .. 'waiting:' .. job end
local function key_undeclared(prefix, job) return prefix .. 'undeclared:' .. job end
local function key_wake(prefix, queue) return prefix .. 'wake:' .. queue end
local function key_fingerprint(prefix, fingerprint) return prefix .. 'fp:' .. fingerprint end
local function key_replica_jobs(prefix, replica) return prefix .. 'replica-jobs:' .. replica end
local function key_wake_replica(prefix, replica) return prefix .. 'wake-replica:' .. replica end

-- The id of a cron fire, as `cron_run_id` in src/store/planning.rs builds it: deterministic,
-- so that one fire is only ever planned once.
local function cron_run_id(job, fire_ms) return job .. '@' .. fire_ms end

-- A published definition (a job's canonical JSON in `defs`, as src/schedule/job.rs writes it)
-- decoded into the fields the scripts read, or nil when it is not one: text that does not
-- decode, or one of those fields missing or of another type. Rust fills every default before
-- it publishes, so the scripts have no default of their own.
local function decode_definition(raw)
  local ok, def = pcall(cjson.decode, raw or '')
  if not ok or type(def) ~= 'table' then
    return nil
  end
  local function text(value)
    return type(value) == 'string' and value or nil
  end
  local function count(value)
    return type(value) == 'number' and value >= 0 and value or nil
  end
  -- Absent (or JSON null) means none; anything else must be a count.
  local function optional_count(value)
    if value == nil or value == cjson.null then
      return false
    end
    return count(value)
  end
  local definition = {
    queue = text(def.queue), priority = text(def.priority), delivery = text(def.delivery),
    overlap = text(def.overlap), misfire = text(def.misfire), retries = count(def.retries),
    backoff = count(def.backoff), max_backoff = count(def.max_backoff),
    max_concurrency = optional_count(def.max_concurrency),
    starting_deadline = optional_count(def.starting_deadline),
  }
  for _, field in ipairs({'queue', 'priority', 'delivery', 'overlap', 'misfire', 'retries',
      'backoff', 'max_backoff', 'max_concurrency', 'starting_deadline'}) do
    if definition[field] == nil then
      return nil
    end
  end
  return definition
end

-- Milliseconds on Redis's own clock, so that replicas with skewed clocks agree on what is due
-- and what has expired. `override` (a number of milliseconds, or '') exists for tests.
--
-- Hot scripts turn numbers they write many times into text once (`tostring`): redis.call
-- formats every number argument with printf, which is a large share of a script's cost.
local function now_ms(override)
  if override ~= nil and override ~= '' then
    return tonumber(override)
  end
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- The fires (ms, as text) of a job planned and not promoted yet, from its entry in the planned
-- hash: a comma-separated list. One hash field per job costs a fraction of a key per job.
local function planned_fires(list)
  local fires = {}
  for fire in string.gmatch(list or '', '%d+') do
    fires[#fires + 1] = fire
  end
  return fires
end

-- Runs `command key values...` over `values` in slices: unpack() is bounded by Lua's stack
-- (about 8,000 values), and a list of runs can be longer. The slice is even, so pairs (ZADD's
-- score and member, HSET's field and value) stay whole. Returns the sum of the replies (how
-- many ZREM or HDEL removed).
local SLICE = 1000
local function in_slices(command, key, values)
  local total = 0
  for first = 1, #values, SLICE do
    total = total + redis.call(command, key, unpack(values, first, math.min(first + SLICE - 1, #values)))
  end
  return total
end

-- Appends one state change of a run to the capped events stream.
local function record_event(events, maxlen, run_id, state, ...)
  redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'run', run_id, 'state', state, ...)
end

-- Ends a run that will not run (paused, duplicate, overlap, missed...), keeping its hash for
-- `retention` ms.
local function skip_run(run_key, run_id, job, reason, now, retention, events, maxlen)
  redis.call('HSET', run_key, 'state', 'skipped', 'reason', reason, 'finished_ms', now)
  redis.call('PEXPIRE', run_key, retention)
  record_event(events, maxlen, run_id, 'skipped', 'job', job, 'reason', reason)
end

-- Sends a run nothing can execute (its id or hash is damaged) to the dead letters.
local function bury_corrupt_run(run_key, run_id, job, now, dead, events, maxlen)
  redis.call('HSET', run_key, 'state', 'dead', 'reason', 'corrupt', 'finished_ms', now)
  redis.call('ZADD', dead, now, run_id)
  record_event(events, maxlen, run_id, 'dead', 'job', job, 'reason', 'corrupt')
end

-- The ready list a run waits in: cron fires (and their retries) have lists of their own, which
-- claims take before the ad-hoc runs of the same queue and priority, so that a backlog of tasks
-- never delays a schedule.
local function ready_list(prefix, kind, queue, priority)
  if kind == 'cron' then
    return prefix .. 'ready-fires:' .. queue .. ':' .. priority
  end
  return prefix .. 'ready:' .. queue .. ':' .. priority
end

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

-- Hands the free slots of a job (`running:<job>`, zset run id -> deadline ms) to the runs
-- waiting for one (`waiting:<job>`, a list, oldest first): each goes back to the head of its
-- ready list with the slot reserved for it, so waiting runs start in the order they came and
-- one at a time when the limit is 1. Slots whose deadline passed (a run whose replica died,
-- a handover never claimed) are freed first. Cost: O(log N) per run handed a slot.
local function fill_job_slots(prefix, job, now)
  local running, waiting = key_running(prefix, job), key_waiting(prefix, job)
  redis.call('ZREMRANGEBYSCORE', running, '-inf', now)
  while true do
    local run_id = redis.call('LINDEX', waiting, 0)
    if not run_id then
      return
    end
    local run_key = key_run(prefix, run_id)
    local state, kind, queue, priority, overlap, max_concurrency = unpack(redis.call('HMGET',
      run_key, 'state', 'kind', 'queue', 'priority', 'overlap', 'max_concurrency'))
    local limit = job_limit(overlap, max_concurrency)
    if state == 'waiting' and queue and priority and limit
        and redis.call('ZCARD', running) >= limit then
      return
    end
    redis.call('LPOP', waiting)
    -- An entry whose run is no longer waiting (ended elsewhere, damaged) is dropped.
    if state == 'waiting' and queue and priority then
      if limit then
        redis.call('ZADD', running, now + SLOT_HANDOVER_MS, run_id)
      end
      redis.call('HSET', run_key, 'state', 'ready', 'ready_ms', now)
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
local function running_since(prefix, running, due_ms)
  for _, run_id in ipairs(redis.call('ZRANGE', running, 0, -1)) do
    local state, started = unpack(redis.call('HMGET', key_run(prefix, run_id), 'state', 'started_ms'))
    started = tonumber(started)
    if state == 'active' and started and started <= due_ms then
      return true
    end
  end
  return false
end

-- Puts a run aside until a slot of its job is free (see fill_job_slots): neither skipped nor dead.
local function wait_for_slot(prefix, run_key, run_id, job)
  redis.call('HSET', run_key, 'state', 'waiting')
  redis.call('RPUSH', key_waiting(prefix, job), run_id)
end
