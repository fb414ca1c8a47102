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
local function key_notices(prefix) return prefix .. 'notices' end
local function key_notice(prefix, id) return prefix .. 'notice:' .. id end
local function key_notices_of(prefix, replica) return prefix .. 'notices-of:' .. replica end
local function key_dead_jobs(prefix) return prefix .. 'dead-jobs' end
local function key_paused(prefix) return prefix .. 'paused' end
local function key_due_runs(prefix) return prefix .. 'due-runs' end
local function key_rewind(prefix) return prefix .. 'rewind' end
local function key_latest_fires(prefix) return prefix .. 'latest-fire' end
-- The dead letters and the events stream, for a helper that may bury a run without them among
-- its arguments (fill_job_slots).
local function key_dead(prefix) return prefix .. 'dead' end
local function key_events(prefix) return prefix .. 'events' end
local function key_targets(prefix, job) return prefix .. 'targets:' .. job end
local function key_replicas(prefix) return prefix .. 'replicas' end
local function key_ready_queues(prefix) return prefix .. 'ready-queues' end
-- The archive's outbox: one record per finished attempt and skipped fire, written beside the
-- event when the namespace archives (record_outcome), until the exporters have archived it.
local function key_archive(prefix) return prefix .. 'archive' end

-- The id of a cron fire, as `cron_run_id` in src/store/planning.rs builds it: deterministic,
-- so that one fire is only ever planned once.
local function cron_run_id(job, fire_ms) return job .. '@' .. fire_ms end

-- A replica's own route, the queue name its every-replica runs wait under, as
-- `private_route` in src/store/keys.rs builds it: no queue name starts with '@'.
local function private_route(replica) return '@' .. replica end

-- The id of one replica's run of an every-replica job's fire, as `replica_run_id` in
-- src/store/keys.rs builds it: deterministic, so that a fire promoted twice makes one run per
-- replica, not two.
local function replica_run_id(fire_id, replica) return fire_id .. ':' .. replica end

-- The name a run's job slots are kept under (running:<name>, waiting:<name>): its job's, or for
-- a replica's run of an every-replica job (`<job>@<fire ms>:<replica>`) `<job>@<replica>`, so
-- that overlap and max_concurrency count per replica. As `slot_group` in src/store/keys.rs.
local function slot_name(job, run_id)
  if string.sub(run_id, 1, #job + 1) == job .. '@' then
    local replica = string.match(string.sub(run_id, #job + 2), '^%d+:(.+)$')
    if replica then
      return job .. '@' .. replica
    end
  end
  return job
end

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
  -- A job's notices: its targets as JSON text and its outcomes as ',dead,late,' (what
  -- add_notice looks for), copied into each of its runs.
  local notify = false
  if type(def.notify) == 'table' then
    local targets, on, late_after = def.notify.targets, def.notify.on, count(def.notify.late_after)
    if type(targets) ~= 'table' or type(on) ~= 'table' or not late_after then
      return nil
    end
    for _, event in ipairs(on) do
      if type(event) ~= 'string' then
        return nil
      end
    end
    notify = {targets = cjson.encode(targets), on = ',' .. table.concat(on, ',') .. ',',
      late_after = tostring(late_after)}
  end
  local definition = {
    notify = notify,
    queue = text(def.queue), priority = text(def.priority), delivery = text(def.delivery),
    overlap = text(def.overlap), misfire = text(def.misfire), retries = count(def.retries),
    backoff = count(def.backoff), max_backoff = count(def.max_backoff),
    max_concurrency = optional_count(def.max_concurrency),
    starting_deadline = optional_count(def.starting_deadline),
    -- Absent for a job whose fires run once (the form before `on` existed).
    every = def.on == 'every',
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

-- `read`, made once per call of a script for each key however many runs ask (a job's definition,
-- whether it is paused), and the table of what it read by key, for a script that writes its
-- reads back at its end. `read` returns anything but nil (false is kept as an answer).
-- Arguments after the key are passed on to `read` the first time.
local function once_per_call(read)
  local known = {}
  return function(key, ...)
    local value = known[key]
    if value == nil then
      value = read(key, ...)
      known[key] = value
    end
    return value
  end, known
end

-- Adds `queue` (a queue or a replica's own route) to {ns}:ready-queues, the index of the queues
-- whose ready lists may hold runs, which readers take instead of walking every key: every script
-- that pushes a run onto a ready list calls it, once per queue per call however many runs it
-- pushes (a member already there costs a SADD that changes nothing, so neither the AOF nor the
-- replicas see it). The index serves readers only, so a damaged one (another type) must not fail
-- the script that moves a run: the reapers' walk refuses it and says so instead.
local note_ready_queue = once_per_call(function(queue, prefix)
  redis.pcall('SADD', key_ready_queues(prefix), queue)
  return true
end)

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

-- Leaves `kept` as the runs of `job` set aside while no live replica declares it, in their
-- order; with none left, the job leaves the set of jobs that have runs set aside.
local function keep_aside(aside, kept, undeclared_jobs, job)
  redis.call('DEL', aside)
  if #kept > 0 then
    in_slices('RPUSH', aside, kept)
  else
    redis.call('ZREM', undeclared_jobs, job)
  end
end

-- Appends a job's notices (see decode_definition) to `fields`, the fields of one of its runs
-- about to be written, so that a run is made with one HSET; returns `fields`.
local function run_notice_fields(fields, notify)
  if notify then
    fields[#fields + 1], fields[#fields + 2] = 'notify', notify.targets
    fields[#fields + 1], fields[#fields + 2] = 'notify_on', notify.on
    fields[#fields + 1], fields[#fields + 2] = 'late_after_ms', notify.late_after
  end
  return fields
end

-- Copies a job's notices into one of its runs, for a script that made the run's hash apart.
local function set_run_notices(run_key, notify)
  if notify then
    redis.call('HSET', run_key, unpack(run_notice_fields({}, notify)))
  end
end

-- The fields of a run a notice keeps, as src/notify reads them.
local NOTICE_RUN_FIELDS = {'job', 'kind', 'queue', 'attempt', 'state', 'reason', 'exit_code',
  'error', 'output', 'fire_ms', 'due_ms', 'started_ms', 'finished_ms', 'worker'}

-- Records that a notice of `event` is owed for a run's current attempt, if the run's job asks
-- for one (`notify` and `notify_on`, the run's own fields, passed in by callers that read them
-- anyway): one per run, attempt and event, however often this is called. The notice keeps its
-- own copy of the run's fields, so that it says what happened even after the run moved on.
-- `replica`, when given, is the replica that recorded the outcome: it sends the notice (see
-- take_notices.lua), which every other replica may take over NOTICE_HANDOFF_MS later, when
-- that replica died first; without one, any replica may take it at once.
local NOTICE_HANDOFF_MS = 15000
local function add_notice(prefix, run_key, run_id, event, now, notify, notify_on, replica)
  if not notify or not notify_on or not string.find(notify_on, ',' .. event .. ',', 1, true) then
    return
  end
  local fields = redis.call('HMGET', run_key, unpack(NOTICE_RUN_FIELDS))
  local id = run_id .. ':' .. (fields[4] or '0') .. ':' .. event
  local takeable = now
  if replica then
    takeable = now + NOTICE_HANDOFF_MS
  end
  if redis.call('ZADD', key_notices(prefix), 'NX', takeable, id) == 0 then
    return
  end
  local values = {'event', event, 'run', run_id, 'targets', notify, 'created_ms', now}
  for index, name in ipairs(NOTICE_RUN_FIELDS) do
    if fields[index] then
      values[#values + 1] = name
      values[#values + 1] = fields[index]
    end
  end
  if replica then
    values[#values + 1] = 'owner'
    values[#values + 1] = replica
    redis.call('ZADD', key_notices_of(prefix, replica), now, id)
  end
  redis.call('HSET', key_notice(prefix, id), unpack(values))
end

-- The replica of a worker id, `<replica id>/<slot>`.
local function replica_of(worker)
  return worker and string.match(worker, '^(.*)/[^/]*$') or nil
end

-- What a script that records outcomes was told of the history it keeps, from its ARGV
-- `<maxlen>` or `<maxlen> archive`: the events stream's approximate cap, and whether the
-- namespace archives (every outcome also gets a record in `{ns}:archive`). `prefix` names the
-- run hashes and the outbox. Nil when the argument is neither. Kept for the call as
-- `told_history` too, for a helper that records an outcome without it among its arguments
-- (fill_job_slots burying a corrupt run).
local told_history
local function history_of(prefix, text)
  local maxlen, mode = string.match(text or '', '^(%d+)(.*)$')
  if not maxlen or (mode ~= '' and mode ~= ' archive') then
    return nil
  end
  told_history = {maxlen = tonumber(maxlen), archive = mode == ' archive', prefix = prefix}
  return told_history
end

-- The outcomes the archive keeps: one record per attempt that ended and per skipped fire.
local ARCHIVED_STATES = {succeeded = true, retrying = true, dead = true, skipped = true}
-- What a record copies from the run's hash: the fields every attempt of the run shares (the
-- job, how it was made and routed, its payload). What an attempt did comes from the event's
-- own fields, never from the hash, which the run's next attempt writes over.
local ARCHIVED_RUN_FIELDS = {'job', 'kind', 'actor', 'triggered', 'queue', 'priority', 'payload',
  'created_ms', 'max_attempts', 'workflow', 'step'}

-- Writes an outcome's record into the archive's outbox, in the call that records the outcome,
-- so the outbox and the events never disagree. `fields` are the event's (they win over the
-- hash's); `output` the tail of the attempt that ended, which only ack_runs and fail_run know
-- (nil for an outcome of no attempt: a skip, a burial). A run whose outcome ends it (succeeded,
-- skipped) gets the record's id as `archive_id`: its hash expires once that record is archived
-- (ack_archived.lua), not before. The hash is read with pcall: a skipped fire has none, and a
-- key of another type must not fail a call that has written already.
local function archive_outcome(history, event_id, run_id, state, output, fields)
  local run_key = key_run(history.prefix, run_id)
  local read = redis.pcall('HMGET', run_key, unpack(ARCHIVED_RUN_FIELDS))
  local values = type(read) == 'table' and not read.err and read or {}
  local record, given = {'event', event_id, 'run', run_id, 'state', state}, {}
  for i = 1, #fields, 2 do
    given[fields[i]] = true
    record[#record + 1], record[#record + 2] = fields[i], fields[i + 1]
  end
  for index, name in ipairs(ARCHIVED_RUN_FIELDS) do
    if values[index] and not given[name] then
      record[#record + 1], record[#record + 2] = name, values[index]
    end
  end
  if output then
    record[#record + 1], record[#record + 2] = 'output', output
  end
  local archive_id = redis.call('XADD', key_archive(history.prefix), '*', unpack(record))
  if values[1] and (state == 'succeeded' or state == 'skipped') then
    redis.call('HSET', run_key, 'archive_id', archive_id)
  end
end

-- Appends one state change of a run to the capped events stream, and its record to the
-- archive's outbox when the namespace archives and the change is an outcome. `output` is the
-- tail of the attempt that ended (ack_runs, fail_run), for the record only: the event does not
-- carry it. Without `history` (a helper that is not told the cap, for a rare event) the stream
-- is not trimmed: the next capped append trims.
local function record_outcome(events, history, run_id, state, output, ...)
  local event_id
  if history then
    event_id = redis.call('XADD', events, 'MAXLEN', '~', history.maxlen, '*', 'run', run_id,
      'state', state, ...)
  else
    event_id = redis.call('XADD', events, '*', 'run', run_id, 'state', state, ...)
  end
  if history and history.archive and ARCHIVED_STATES[state] then
    archive_outcome(history, event_id, run_id, state, output, {...})
  end
end

-- record_outcome for a change that ended no attempt of its own (a skip, a burial, a re-drive).
local function record_event(events, history, run_id, state, ...)
  record_outcome(events, history, run_id, state, nil, ...)
end

-- Gives a run that ended (succeeded, skipped) its `retention`: when the namespace archives, its
-- expiry waits for its record to be archived (ack_archived.lua), so that no run is gone from
-- Redis before the archive has it.
local function expire_finished_run(run_key, retention, history)
  if not (history and history.archive) then
    redis.call('PEXPIRE', run_key, retention)
  end
end

-- The archive's consumer group on its outbox, as XINFO GROUPS tells it (`last-delivered-id`,
-- `lag`: nil when Redis cannot count it), or nil when the outbox or the group does not exist.
local function archive_group(archive, group)
  if redis.call('EXISTS', archive) == 0 then
    return nil
  end
  for _, entry in ipairs(redis.call('XINFO', 'GROUPS', archive)) do
    local info = {}
    for i = 1, #entry, 2 do
      info[entry[i]] = entry[i + 1]
    end
    if info.name == group then
      return info
    end
  end
  return nil
end

-- Appends an operator's action (a job's pause, resume, trigger or enqueue, a purge of dead
-- runs, a workflow instance run again) to the events stream:
-- no `state`, so that readers of outcomes pass over it. `job` is nil for an enqueue of several
-- jobs' runs, `actor` '' when not told who; an action that made runs names the first (`run`)
-- and how many (`runs`), one entry for the whole call whatever their number.
local function record_action(events, maxlen, job, action, actor, run_id, runs)
  local fields = {'action', action}
  if job then
    fields[#fields + 1], fields[#fields + 2] = 'job', job
  end
  if actor ~= '' then
    fields[#fields + 1], fields[#fields + 2] = 'actor', actor
  end
  if run_id then
    fields[#fields + 1], fields[#fields + 2] = 'run', run_id
    fields[#fields + 1], fields[#fields + 2] = 'runs', tostring(runs)
  end
  if maxlen then
    redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', unpack(fields))
  else
    redis.call('XADD', events, '*', unpack(fields))
  end
end

-- Records in its workflow how a run that is a workflow step ended, and starts the steps that
-- this lets start: defined in include/workflows.lua, which is loaded after this file.
local workflow_step_ended

-- Ends a run that will not run (paused, duplicate, overlap, missed...), keeping its hash for
-- `retention` ms.
-- A fire skipped because the job's previous run still ran, because it was missed or because
-- it could not start by its deadline sends a `skipped` notice, unless `quiet` (another skip of
-- the job in the same call already told it); nothing a paused job skips does: pausing is the
-- operator's doing.
local function skip_run(prefix, run_key, run_id, job, reason, now, retention, events, history, quiet)
  redis.call('HSET', run_key, 'state', 'skipped', 'reason', reason, 'finished_ms', now)
  expire_finished_run(run_key, retention, history)
  record_event(events, history, run_id, 'skipped', 'job', job, 'reason', reason)
  if workflow_step_ended then
    workflow_step_ended(prefix, run_key, 'skipped', '', now)
  end
  if quiet or not (reason == 'overlap' or reason == 'missed' or reason == 'deadline'
      or reason == 'replica-down') then
    return
  end
  local notify, notify_on = unpack(redis.call('HMGET', run_key, 'notify', 'notify_on'))
  -- The pause is read only for a job that asks for the notice: most skip without one.
  if notify_on and string.find(notify_on, ',skipped,', 1, true)
      and redis.call('SISMEMBER', key_paused(prefix), job) == 0 then
    add_notice(prefix, run_key, run_id, 'skipped', now, notify, notify_on)
  end
end

-- Sends a run nothing can execute (its id or hash is damaged) to the dead letters. An id with
-- no record gets none: the dead letters list it as damaged, an id that no run has, rather than
-- as a run of no job.
local function bury_corrupt_run(prefix, run_key, run_id, job, now, dead, events, history)
  if redis.call('EXISTS', run_key) == 1 then
    redis.call('HSET', run_key, 'state', 'dead', 'reason', 'corrupt', 'finished_ms', now)
  end
  redis.call('ZADD', dead, now, run_id)
  record_event(events, history, run_id, 'dead', 'job', job, 'reason', 'corrupt')
  if workflow_step_ended then
    workflow_step_ended(prefix, run_key, 'failed', '', now)
  end
end

-- Whether a run's `queue` and `priority` fields name a ready list a claim reads: a queue name
-- as src/schedule/file checks it (check_name) and one of the three priorities. A run routed
-- otherwise (a damaged or hand-written field) would wait in a list no replica ever reads.
local PRIORITIES = {high = true, normal = true, low = true}
local function routable(queue, priority)
  return type(queue) == 'string' and #queue <= 128
    and (string.match(queue, '^[a-z0-9][a-z0-9._%-]*$') ~= nil
      or string.match(queue, '^@[%w._%-@]+$') ~= nil)
    and PRIORITIES[priority] == true
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

-- Redis does not undo a script's writes when a later command of it fails, so a key of another
-- type than the script expects (damaged by hand, or written by something else) would fail the
-- script halfway: a run popped from its list and never put anywhere. Every script therefore
-- checks the type of the keys it is given before its first write, and refuses with an error
-- that names the script and the key, having written nothing. A key that does not exist is of
-- every type. `types[i]` is the type (as TYPE names it) of `keys[i]`; 'channel' is no key;
-- 'hold' is the namespace's hold key, below.
--
-- While the namespace is held (`redcron hold`, around a migration of its slot), every script that
-- builds keys of its own refuses before it writes, with the code HELD. The hold key is among the
-- script's KEYS, so on a slot being migrated Redis runs the script only where every declared key
-- is, the hold key included: it refuses there instead of failing halfway at a key already moved.
-- Cost: one TYPE per key.
local function refuse_wrong_type(script, key, found, wanted)
  error({err = 'WRONGTYPE ' .. script .. ': ' .. key .. ' holds a ' .. found .. ', not a '
    .. wanted .. ' (nothing was written)'})
end
local function check_type(script, key, wanted)
  local found = redis.call('TYPE', key).ok
  if found ~= 'none' and found ~= wanted then
    refuse_wrong_type(script, key, found, wanted)
  end
  return found
end
local HELD = 'HELD the namespace is held (redcron hold): try again once it is released'
local function check_types(script, keys, types)
  for i, wanted in ipairs(types) do
    if wanted == 'hold' then
      if check_type(script, keys[i], 'string') ~= 'none' then
        error({err = HELD})
      end
    elseif wanted ~= 'channel' then
      check_type(script, keys[i], wanted)
    end
  end
end

-- The reply of `command` on `key`, a read the script makes anyway before it writes (a run's
-- hash): the same check as check_type, at no extra cost when the key is of its type.
local function checked_read(script, key, wanted, command, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    refuse_wrong_type(script, key, redis.call('TYPE', key).ok, wanted)
  end
  return reply
end

-- Checks a job's slots (running:<job>) and its waiting runs (waiting:<job>), as
-- check_type does, for a script about to free or take a slot of the job.
local function check_job_keys(script, prefix, job)
  check_type(script, key_running(prefix, job), 'zset')
  check_type(script, key_waiting(prefix, job), 'list')
end
