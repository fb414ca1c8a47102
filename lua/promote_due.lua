#!lua
-- Moves runs whose due time has come, or comes within the lead, from the due set to their ready
-- lists, applying the job's misfire policy and starting deadline to runs that come too late. A
-- run moved ahead of its due time is claimed ahead and started at that time by its worker (see
-- claim_runs.lua), so promotion and claim are off the path between due time and start.
--
-- A planned cron fire has no run hash yet (planned runs cost only their due and planned
-- entries): it is created here from the job's published definition. Ad-hoc runs and retries
-- already have one. A fire claimed ahead that never started (Redis did not answer at its due
-- time, so its short lease expired, or it was handed back) comes due again here, and is judged
-- by the misfire policy as if it came due only now: `run-once` skips it when a later fire of the
-- job has come due already (KEYS[8]), since that one ran or was judged in its place.
--
-- `run-once` runs a missed fire only when it is the job's latest missed fire. After an outage
-- longer than the planner's horizon, the fires missed after the last one planned are not planned
-- yet: a missed fire that would run as the latest is then left due until the leader has planned
-- up to the misfire threshold (KEYS[10]), and judged again among the fires it plans.
--
-- A fire made ready within the threshold is judged again when it starts (missed_at_start in
-- common.lua): a fire of a job at its limit waits for a slot and may be past the threshold by
-- then. A replica's run of an every-replica fire may still wait when that replica's run of the
-- job's next fire comes due (the replica was away): the older run is told that next due time
-- (note_next_due), by which it is superseded. This script writes what that needs into the
-- fire's run hash (each of its replicas' runs, for an every-replica fire: make_run): its
-- `misfire` policy and `missed_after_ms` (its due
-- time, the fire plus its jitter, plus ARGV[3]: the same base this script judges lateness from,
-- so a jitter longer than the threshold makes no fire missed that started on time); none for
-- `run-all`, nor for a fire made ready
-- already past the threshold (the one `run-once` runs late, judged here once and for all).
--
-- A fire of an every-replica job (`on = "every"`) that runs becomes one run per target, decided
-- here, once: the replicas that declared the job within the misfire threshold (targets:<job>,
-- which their heartbeats keep), down or not. Each run has its own id (<fire id>:<replica>, so a
-- fire promoted twice makes no second run) and waits in that replica's own route
-- (ready-fires:@<replica>:<priority>), which only that replica claims. The fire's own id gets no
-- run, unless it is skipped whole (missed, past its deadline, or no target: `no-target`).
--
-- Redis refuses it whole while out of memory (the flags line, no allow-oom): a fire that became
-- ready then would wait there, past the judgement below, for claims that cannot start it; left
-- due, it is judged when writes resume, as after any outage.
--
-- KEYS[1] due     zset    run id -> due ms
-- KEYS[2] defs    hash    job -> definition JSON, published by the leader
-- KEYS[3] events  stream  run state changes
-- KEYS[4] dead    zset    run id -> ms it died
-- KEYS[5] planned hash    job -> its fires planned and not promoted yet, ms, comma-separated
-- KEYS[6] damaged set     jobs whose definition in defs is unreadable: the leader writes them
--                         again; their fires stay due meanwhile, neither skipped nor dead
-- KEYS[7] hold  string  set while the namespace is held (redcron hold): nothing is written
-- KEYS[8] latest-fire hash  job -> its latest fire promoted (made ready or skipped), ms
-- KEYS[9] due-runs zset    run id -> due ms, of ad-hoc runs: taken only once the fires due by
--                          then are (KEYS[1]), so that a backlog of runs due at one instant,
--                          however large, never holds back a fire due in that instant
-- KEYS[10] planned-through string  ms up to which the leader has planned every job's fires;
--                          absent until a leader wrote it (then no fire waits for it)
-- ARGV[1] key prefix "{ns}:" for run:<id>, ready-fires:<queue>:<priority>, ready:<queue>:<priority>,
--         wake:<queue>, ready-queues
-- ARGV[2] limit: most runs moved by this call
-- ARGV[3] misfire threshold, ms: a run later than this is a missed fire
-- ARGV[4] events stream MAXLEN (approximate), ' archive' after it when the namespace archives
-- ARGV[5] retention of finished run hashes, ms
-- ARGV[6] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[7] lead, ms: runs due this soon are moved already
--
-- Returns {runs made ready, runs skipped or dead, next due ms or -1 when nothing else is due,
-- now ms, fires left due for a damaged definition, then a job and a reason for each run skipped
-- or dead}.
-- Cost: O(limit log N).
check_types('promote_due', KEYS, {'zset', 'hash', 'stream', 'zset', 'hash', 'set', 'hold',
  'hash', 'zset', 'string'})
local due, defs, events, dead, planned, damaged = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local latest_fire, due_runs, planned_through = KEYS[8], KEYS[9], KEYS[10]
local prefix, limit, threshold = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local history = history_of(prefix, ARGV[4])
local retention, lead = tonumber(ARGV[5]), tonumber(ARGV[7])
if not limit or not threshold or not history or not retention or not lead then
  return redis.error_reply('ERR promote_due: limit, threshold, maxlen, retention and lead must be numbers')
end
local now = now_ms(ARGV[6])
local now_text = tostring(now)

-- A job's definition (decode_definition in common.lua) from its entry in defs, 'absent' (no
-- replica declares the job any more), or 'damaged' (there, but not a definition the scripts can
-- read): a damaged one must not make a write fail half-way, after the run left the due set.
local function definition_of(raw)
  if not raw then
    return 'absent'
  end
  return decode_definition(raw) or 'damaged'
end
local definition, definitions = once_per_call(function(job)
  return definition_of(redis.call('HGET', defs, job))
end)

-- Each job's planned fires, read once per call and written back at its end, less the fires
-- this call took out of the due set.
local function plan_from(list)
  return {fires = planned_fires(list), taken = {}}
end
local plan_of, plans = once_per_call(function(job)
  return plan_from(redis.call('HGET', planned, job))
end)

-- Each job's latest fire promoted: read once per call, written back at its end when it moved.
local function latest_from(value)
  local known = tonumber(value) or 0
  return {known = known, fire = known}
end
local latest_of, latest = once_per_call(function(job)
  return latest_from(redis.call('HGET', latest_fire, job))
end)

-- Reads the definition, planned fires and latest fire of the jobs of the cron fires among
-- `run_ids` (ids and scores) with one HMGET of each hash per slice of jobs, where each job's
-- first fire would read them with three HGETs: a call takes most jobs' fires one at a time.
local function read_jobs(run_ids)
  local jobs, seen = {}, {}
  for i = 1, #run_ids, 2 do
    local job = string.match(run_ids[i], '^(.+)@%d+$')
    if job and not seen[job] then
      seen[job] = true
      jobs[#jobs + 1] = job
    end
  end
  for first = 1, #jobs, SLICE do
    local slice = {unpack(jobs, first, math.min(first + SLICE - 1, #jobs))}
    local raws = redis.call('HMGET', defs, unpack(slice))
    local lists = redis.call('HMGET', planned, unpack(slice))
    local fires = redis.call('HMGET', latest_fire, unpack(slice))
    for index, job in ipairs(slice) do
      definitions[job] = definition_of(raws[index] or nil)
      plans[job] = plan_from(lists[index] or nil)
      latest[job] = latest_from(fires[index])
    end
  end
end

-- Whether a later fire of the same job is also missed: run-once keeps only the latest.
local function later_fire_also_missed(job, fire_ms)
  local plan = plan_of(job)
  for _, fire in ipairs(plan.fires) do
    local later = tonumber(fire)
    if not plan.taken[fire] and later > fire_ms and later <= now - threshold then
      return true
    end
  end
  return false
end

-- Whether the leader has not planned every fire up to the misfire threshold yet: after an
-- outage longer than the planner's horizon, the latest fire planned before it is not the latest
-- missed one, and `run-once` must not run it as such. Read once per call, only for a fire that
-- is missed, so a fire on time costs nothing more.
local behind
local function planning_behind()
  if behind == nil then
    local through = tonumber(redis.call('GET', planned_through))
    behind = through ~= nil and through < now - threshold
  end
  return behind
end

-- Why a fire of `job` claimed ahead and never started, due again now, is skipped; nil when it
-- runs.
local function misfire_of_unstarted(job, fire)
  local def = definition(job)
  if type(def) ~= 'table' then
    return nil
  end
  local lateness = now - fire
  if def.starting_deadline and lateness > def.starting_deadline then
    return 'deadline'
  end
  if lateness <= threshold or def.misfire == 'run-all' then
    return nil
  end
  if def.misfire == 'skip' or latest_of(job).fire > fire then
    return 'missed'
  end
  if planning_behind() then
    return 'awaiting-plan'
  end
  return nil
end

-- The replicas a fire of the every-replica job `job` runs on, read when one of its fires runs;
-- nil when targets:<job> is not a zset (damaged: the fire is skipped, not failed half-way).
local function targets_of(job)
  local targets = redis.pcall('ZRANGEBYSCORE', key_targets(prefix, job), now - threshold, '+inf')
  if type(targets) ~= 'table' or targets.err then
    return nil
  end
  return targets
end

-- The fields of a cron fire's run made from its job's definition, waiting in `queue`; `in_time`
-- when it is made ready within the threshold, so that it is judged again at its start. Returned
-- rather than written, so that the run's hash is written once, with the state it is made in.
local function run_fields(job, fire_ms, due_text, def, queue, fingerprint, in_time)
  local fields = {'job', job, 'kind', 'cron', 'fire_ms', fire_ms, 'due_ms', due_text,
    'created_ms', now_text, 'attempt', 0, 'max_attempts', def.retries + 1,
    'queue', queue, 'priority', def.priority,
    'backoff_ms', def.backoff, 'max_backoff_ms', def.max_backoff,
    'delivery', def.delivery, 'overlap', def.overlap,
    'fingerprint', fingerprint}
  if def.max_concurrency then
    fields[#fields + 1], fields[#fields + 2] = 'max_concurrency', def.max_concurrency
  end
  -- Made ready in time, it is judged again when it starts (missed_at_start in
  -- common.lua): it may wait for a slot past the threshold.
  if in_time and def.misfire ~= 'run-all' then
    fields[#fields + 1], fields[#fields + 2] = 'misfire', def.misfire
    fields[#fields + 1], fields[#fields + 2] = 'missed_after_ms', tonumber(due_text) + threshold
  end
  return run_notice_fields(fields, def.notify)
end

local ready, skipped = 0, 0
local skips = {}
local deferred = {}     -- due ms, run id: fires put back for a damaged definition
local awaiting_plan = {} -- due ms, run id: missed fires put back until the leader has planned
local ready_lists = {}  -- ready list key -> run ids, pushed together at the end
local woken = {}        -- wake marker key -> true
local told_skip = {}    -- job -> true once one of its skips in this call sent a notice
local fanned = {}       -- run id -> true: an every-replica fire made into its replicas' runs

-- Makes a run ready: into its list (pushed with the others at the end) and its queue woken.
-- Becoming ready is not an event: the run hash records when. `made`, for a run made by this
-- call, are the fields that make it (run_fields), written in the same HSET.
local function make_ready(run_key, run_id, kind, queue, priority, made)
  local fields = made or {}
  fields[#fields + 1], fields[#fields + 2] = 'state', 'ready'
  fields[#fields + 1], fields[#fields + 2] = 'ready_ms', now_text
  redis.call('HSET', run_key, unpack(fields))
  local list = ready_list(prefix, kind, queue, priority)
  ready_lists[list] = ready_lists[list] or {}
  table.insert(ready_lists[list], run_id)
  woken[key_wake(prefix, queue)] = true
  note_ready_queue(queue, prefix)
  ready = ready + 1
end
-- The fires due first, then as many ad-hoc runs as the limit leaves: the ones only when no fire
-- due by then is left behind.
local horizon = tostring(now + lead)
local run_ids = redis.call('ZRANGEBYSCORE', due, '-inf', horizon, 'WITHSCORES', 'LIMIT', 0, limit)
local taken = {}
for i = 1, #run_ids, 2 do
  taken[#taken + 1] = run_ids[i]
end
in_slices('ZREM', due, taken)
if #taken < limit then
  local runs = redis.call('ZRANGEBYSCORE', due_runs, '-inf', horizon, 'WITHSCORES', 'LIMIT', 0,
    limit - #taken)
  local taken_runs = {}
  for i = 1, #runs, 2 do
    taken_runs[#taken_runs + 1] = runs[i]
    run_ids[#run_ids + 1], run_ids[#run_ids + 2] = runs[i], runs[i + 1]
  end
  in_slices('ZREM', due_runs, taken_runs)
end
read_jobs(run_ids)
for i = 1, #run_ids, 2 do
  local run_id, due_ms = run_ids[i], tonumber(run_ids[i + 1])
  local run_key = key_run(prefix, run_id)
  local job, queue, priority, state, kind, fire_ms, attempt, starting, last_reason =
    unpack(redis.call('HMGET', run_key, 'job', 'queue', 'priority', 'state', 'kind', 'fire_ms',
      'attempt', 'starting', 'reason'))
  local reason
  -- The fields of a run this call makes, written with the state it ends in.
  local made
  if job or state then
    -- Only a retry or a delayed run is due again. Any other state means this id was planned
    -- again after it ran or while it runs (a lost cursor, say): it must not run twice.
    if state ~= 'retrying' and state ~= 'scheduled' then
      reason = 'duplicate'
    elseif kind == 'cron' and attempt == '0' and tonumber(fire_ms)
        and (starting == '1' or last_reason == 'not-started') then
      reason = misfire_of_unstarted(job, tonumber(fire_ms))
      if reason then
        -- Skipped, it ran nothing: the start and worker of its claim ahead are not its.
        redis.call('HDEL', run_key, 'worker', 'started_ms', 'starting')
      -- Made ready past the threshold, it is the fire its policy runs late: not judged again.
      elseif now - tonumber(fire_ms) > threshold then
        redis.call('HDEL', run_key, 'missed_after_ms')
      end
    end
  else
    local fire_ms
    job, fire_ms = string.match(run_id, '^(.+)@(%d+)$')
    local def = job and definition(job)
    -- Judged before anything is written: a fire put back must stay planned, with no run hash.
    local lateness = now - due_ms
    local judged
    if type(def) == 'table' then
      if def.starting_deadline and lateness > def.starting_deadline then
        judged = 'deadline'
      elseif lateness > threshold then
        if def.misfire == 'skip' then
          judged = 'missed'
        elseif def.misfire ~= 'run-all' then
          if later_fire_also_missed(job, tonumber(fire_ms)) then
            judged = 'missed'
          elseif planning_behind() then
            judged = 'awaiting-plan'
          end
        end
      end
    end
    if judged == 'awaiting-plan' then
      reason = judged
    else
      -- The job's fire before this one, whose replicas' runs this one's supersede once they
      -- come due.
      local previous
      if job and def ~= 'damaged' then
        plan_of(job).taken[fire_ms] = true
        local seen = latest_of(job)
        if seen.fire > 0 and seen.fire < tonumber(fire_ms) then
          previous = cron_run_id(job, seen.fire)
        end
        seen.fire = math.max(seen.fire, tonumber(fire_ms))
      end
      if not job then
        reason = 'corrupt'
        job = ''
      elseif def == 'absent' then
        reason = 'undeclared'
      elseif def == 'damaged' then
        reason = 'deferred'
      else
        queue, priority, kind = def.queue, def.priority, 'cron'
        local in_time = not judged and lateness <= threshold
        local targets = def.every and not judged and targets_of(job)
        if targets and #targets > 0 then
          for _, replica in ipairs(targets) do
            local replica_run = replica_run_id(run_id, replica)
            local replica_key = key_run(prefix, replica_run)
            if redis.call('EXISTS', replica_key) == 1 then
              -- Promoted before (the fire was planned again): one run per replica, ever.
              record_event(events, history, replica_run, 'skipped', 'job', job, 'reason', 'duplicate')
            else
              local route = private_route(replica)
              if previous then
                note_next_due(prefix, replica_run_id(previous, replica), run_ids[i + 1])
              end
              make_ready(replica_key, replica_run, kind, route, priority,
                run_fields(job, fire_ms, run_ids[i + 1], def, route, replica_run, in_time))
            end
          end
          fanned[run_id] = true
        else
          made = run_fields(job, fire_ms, run_ids[i + 1], def, queue, run_id, in_time)
          reason = judged or (def.every and 'no-target') or nil
        end
      end
    end
  end
  if made and (reason or not routable(queue, priority)) then
    -- Not made ready: its hash is written first, as the skip or the burial reads it.
    redis.call('HSET', run_key, unpack(made))
  end
  if fanned[run_id] then
    -- Made into its replicas' runs above.
  elseif reason == 'awaiting-plan' then
    awaiting_plan[#awaiting_plan + 1] = run_ids[i + 1]
    awaiting_plan[#awaiting_plan + 1] = run_id
  elseif reason == 'deferred' then
    deferred[#deferred + 1] = run_ids[i + 1]
    deferred[#deferred + 1] = run_id
    redis.call('SADD', damaged, job)
  elseif reason == 'duplicate' then
    record_event(events, history, run_id, 'skipped', 'job', job or '', 'reason', reason)
  elseif reason == 'corrupt' or (not reason and not routable(queue, priority)) then
    -- An id that names no job, or a run hash without a routing a claim reads (no queue, a
    -- queue that is no name, a priority of none of the three): nothing can run it.
    reason = 'corrupt'
    bury_corrupt_run(prefix, run_key, run_id, job or '', now, dead, events, history)
  elseif reason then
    -- Fires missed in an outage come due together: one notice per job says so.
    skip_run(prefix, run_key, run_id, job, reason, now, retention, events, history, told_skip[job])
    told_skip[job] = true
  else
    make_ready(run_key, run_id, kind, queue, priority, made)
  end
  if reason and reason ~= 'deferred' and reason ~= 'awaiting-plan' then
    skipped = skipped + 1
    skips[#skips + 1] = job or ''
    skips[#skips + 1] = reason
  end
end
for list, ids in pairs(ready_lists) do
  in_slices('RPUSH', list, ids)
end
-- Written back in one HDEL and one HSET of each hash for every job, not a command per job.
local emptied, still_planned, latest_fires = {}, {}, {}
for job, plan in pairs(plans) do
  -- A job read ahead (read_jobs) none of whose fires this call took is left as it was.
  if next(plan.taken) then
    local left = {}
    for _, fire in ipairs(plan.fires) do
      if not plan.taken[fire] then
        left[#left + 1] = fire
      end
    end
    if #left == 0 then
      emptied[#emptied + 1] = job
    elseif #left < #plan.fires then
      still_planned[#still_planned + 1] = job
      still_planned[#still_planned + 1] = table.concat(left, ',')
    end
  end
end
for job, seen in pairs(latest) do
  if seen.fire > seen.known then
    latest_fires[#latest_fires + 1] = job
    latest_fires[#latest_fires + 1] = seen.fire
  end
end
in_slices('HDEL', planned, emptied)
in_slices('HSET', planned, still_planned)
in_slices('HSET', latest_fire, latest_fires)
-- One member per queue, so idle workers wake without the marker growing.
for marker in pairs(woken) do
  redis.call('ZADD', marker, 0, 'ready')
end

-- The next due time leaves out the fires put back: they wait for the leader's repair, which
-- wakes the promoters, or its next plan, which the promoters' longest sleep sees, not for a
-- busy loop.
local next_fire = tonumber(redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')[2])
local next_run = tonumber(redis.call('ZRANGE', due_runs, 0, 0, 'WITHSCORES')[2])
local next_due = next_fire and next_run and math.min(next_fire, next_run) or next_fire or next_run
in_slices('ZADD', due, deferred)
in_slices('ZADD', due, awaiting_plan)
local reply = {ready, skipped, next_due or -1, now, #deferred / 2}
for _, value in ipairs(skips) do
  reply[#reply + 1] = value
end
return reply
