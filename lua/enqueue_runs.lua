-- Creates ad-hoc runs of declared jobs, due now or later, optionally unique: a second run with
-- the same fingerprint inside its window is refused and told which run holds it. One call
-- creates many runs (bulk enqueue); each run is created whole or not at all, and once: a run id
-- that exists already is answered as created and left as it is.
--
-- A run due now goes straight to its ready list and wakes the queue's idle workers; a later one
-- waits in the ad-hoc runs' due set and wakes the promoters, which sleep until the earliest due
-- time they know of. That set is not the fires': promotion takes the fires due first, so runs
-- enqueued for one instant, however many, never hold back a fire due then.
--
-- Told who asks, each run made carries it (`actor`, in the HSET that makes it: no command more
-- per run; a trigger's runs are marked `triggered` too), and the call records one action in
-- the events stream (`enqueue` or `trigger`, its first run and how many it made, its job when
-- they are all one job's): one entry per call of up to a thousand runs, so that a bulk enqueue
-- does not fill the stream its outcomes live in.
--
-- KEYS[1] due-runs       zset    run id -> due ms, of ad-hoc runs
-- KEYS[2] defs           hash    job -> definition JSON, published by the leader
-- KEYS[3] paused         set     paused job names
-- KEYS[4] wake-promoter  channel told when a run becomes due
-- KEYS[5] hold  string  set while the namespace is held (redcron hold): nothing is written
-- KEYS[6] events         stream  run state changes, and actions on jobs
-- ARGV[1] key prefix "{ns}:" for run:<id>, fp:<fingerprint>, ready:<queue>:<priority>, wake:<queue>,
--         ready-queues
-- ARGV[2] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[3] who asks (a console's token or user, `cli`, a program's name), or '' when not told:
--         then nothing is recorded of who, and no action
-- ARGV[4] the action recorded: 'enqueue', or 'trigger' (`redcron trigger` of a job whose
--         fires run once)
-- ARGV[5] events stream MAXLEN (approximate)
-- ARGV[6..] groups of 7, one per run: run id (time-ordered, unique), job name, due ms or '' for
--           now, payload (JSON text, may be ''), priority (high | normal | low) or '' for the
--           job's own, fingerprint or '' when the run need not be unique, uniqueness window ms
--
-- A job that runs on every replica (`on = "every"`) takes no ad-hoc run: its runs are its fires'
-- and its triggers' (trigger_fire.lua), one per replica in that replica's own route and slots,
-- and a run of the job's own would hold none of those slots, so it could run beside a
-- replica's fire despite `overlap = "forbid"`.
--
-- Whether a run exists is asked of the whole call at once (one EXISTS), and of each run only
-- when one does.
--
-- Returns 3 values per run, in order: 'OK', due ms, 1 if the job is paused else 0; or
-- 'UNKNOWN', 0, 0 for a job no replica has declared; or 'EVERY', 0, 0 for a job that runs on
-- every replica; or 'DUPLICATE', the run id holding the fingerprint, 0.
-- Cost: O(runs log N), and one XADD when told who asks.
check_types('enqueue_runs', KEYS, {'zset', 'hash', 'set', 'channel', 'hold', 'stream'})
local due, defs, paused, wake, events = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]
local prefix, actor, action, maxlen = ARGV[1], ARGV[3], ARGV[4], tonumber(ARGV[5])
if (#ARGV - 5) % 7 ~= 0 then
  return redis.error_reply('ERR enqueue_runs: runs come in groups of 7')
end
if action ~= 'enqueue' and action ~= 'trigger' then
  return redis.error_reply('ERR enqueue_runs: ARGV[4] must be enqueue or trigger, not '
    .. tostring(action))
end
-- Who asks and whether a trigger, as the last fields of each run's HSET: marked as
-- trigger_fire.lua marks a fire's runs.
local acting = {}
if actor ~= '' then
  acting[#acting + 1], acting[#acting + 2] = 'actor', actor
end
if action == 'trigger' then
  acting[#acting + 1], acting[#acting + 2] = 'triggered', '1'
end
local now = now_ms(ARGV[2])
local now_text = tostring(now)

-- Each job's definition and pause, read once per call.
local declared = once_per_call(function(job)
  local def = decode_definition(redis.call('HGET', defs, job))
  if not def then
    return false
  end
  return {
    queue = def.queue,
    priority = def.priority,
    max_attempts = tostring(def.retries + 1),
    backoff = tostring(def.backoff),
    max_backoff = tostring(def.max_backoff),
    delivery = def.delivery,
    overlap = def.overlap,
    max_concurrency = def.max_concurrency and tostring(def.max_concurrency) or nil,
    paused = redis.call('SISMEMBER', paused, job),
    notify = def.notify,
    every = def.every,
  }
end)

-- Whether any run of the call exists already (a retried call), asked of all of them in one
-- EXISTS: run ids are unique, so this is nearly always none, and then no run pays a read of
-- its own. When one does, each run's `due_ms` says which.
local run_keys = {}
for i = 6, #ARGV, 7 do
  run_keys[#run_keys + 1] = key_run(prefix, ARGV[i])
end
local any_exists = false
for first = 1, #run_keys, SLICE do
  if redis.call('EXISTS', unpack(run_keys, first, math.min(first + SLICE - 1, #run_keys))) > 0 then
    any_exists = true
    break
  end
end

local reply = {}
local made_here = {}      -- run id -> due ms (text), of the runs this call made
local ready = {}          -- ready list key -> run ids
local woken = {}          -- wake marker key -> true
local later = {}          -- due ms, run id, ...
local earliest
local first_run, made, made_job = nil, 0, nil
for i = 6, #ARGV, 7 do
  local run_id, job, due_arg, payload = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local priority, fingerprint, window = ARGV[i + 4], ARGV[i + 5], tonumber(ARGV[i + 6]) or 0
  local def = declared(job)
  local due_ms, due_text = tonumber(due_arg), due_arg
  if not due_ms then
    due_ms, due_text = now, now_text
  end
  -- The owner matches what claim_runs checks, so the run's own claim passes its reservation.
  local owner = run_id .. '/' .. now_text
  local fingerprint_key = fingerprint ~= '' and key_fingerprint(prefix, fingerprint)
  -- A run made earlier in this call counts as existing too, as its HGET would have found it.
  local existing_due = made_here[run_id]
    or (any_exists and redis.call('HGET', key_run(prefix, run_id), 'due_ms'))
  if not def then
    reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = 'UNKNOWN', 0, 0
  elseif def.every then
    reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = 'EVERY', 0, 0
  elseif existing_due then
    -- The run exists: this call repeats one whose reply was lost (a client retried it after
    -- its connection broke). Answered as the first was, and nothing is created again.
    reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = 'OK', tonumber(existing_due), def.paused
  elseif fingerprint_key and not redis.call('SET', fingerprint_key, owner, 'NX', 'PX', math.max(window, 1)) then
    local holder = redis.call('GET', fingerprint_key) or ''
    reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = 'DUPLICATE', (string.gsub(holder, '/%d+$', '')), 0
  else
    if priority == '' then
      priority = def.priority
    end
    local state = due_ms <= now and 'ready' or 'scheduled'
    local run_key = key_run(prefix, run_id)
    -- The fields only some runs carry, after those every run has, in the one write that makes
    -- the run. Empty ones are left out: a field costs even when it says nothing, and an empty
    -- payload is no payload, not a JSON text.
    local fields = {unpack(acting)}
    if fingerprint ~= '' then
      fields[#fields + 1], fields[#fields + 2] = 'fingerprint', fingerprint
    end
    if payload ~= '' then
      fields[#fields + 1], fields[#fields + 2] = 'payload', payload
    end
    if def.max_concurrency then
      fields[#fields + 1], fields[#fields + 2] = 'max_concurrency', def.max_concurrency
    end
    redis.call('HSET', run_key,
      'job', job, 'kind', 'adhoc', 'due_ms', due_text, 'created_ms', now_text,
      'attempt', '0', 'max_attempts', def.max_attempts, 'queue', def.queue, 'priority', priority,
      'backoff_ms', def.backoff, 'max_backoff_ms', def.max_backoff,
      'delivery', def.delivery, 'overlap', def.overlap, 'state', state,
      unpack(run_notice_fields(fields, def.notify)))
    if state == 'ready' then
      local list = ready_list(prefix, 'adhoc', def.queue, priority)
      ready[list] = ready[list] or {}
      table.insert(ready[list], run_id)
      woken[key_wake(prefix, def.queue)] = true
      note_ready_queue(def.queue, prefix)
    else
      later[#later + 1] = due_ms
      later[#later + 1] = run_id
      earliest = math.min(earliest or due_ms, due_ms)
    end
    reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = 'OK', due_ms, def.paused
    made_here[run_id] = due_text
    first_run, made = first_run or run_id, made + 1
    -- The job's name while every run made is of it; false once two jobs' are.
    made_job = (made_job == nil or made_job == job) and job or false
  end
end

for list, run_ids in pairs(ready) do
  in_slices('RPUSH', list, run_ids)
end
-- One member per queue, so idle workers wake without the marker growing.
for marker in pairs(woken) do
  redis.call('ZADD', marker, 0, 'ready')
end
if #later > 0 then
  in_slices('ZADD', due, later)
  redis.call('PUBLISH', wake, earliest)
end
if actor ~= '' and first_run then
  record_action(events, maxlen, made_job or nil, action, actor, first_run, made)
end
return reply
