-- Claims ready runs for several idle workers at once, one run each: strict priority order
-- (high, then normal, then low) across the queues they serve, at each priority the cron fires of
-- every queue before any ad-hoc run, after the checks that decide whether a run may start at
-- all. One call serves every idle worker of a replica, so a burst costs one round trip per batch
-- rather than per run.
--
-- A replica claims only runs of the jobs it declares (KEYS[5], published by its heartbeat): a
-- popped run of another job is put aside in undeclared:<job> (listed in KEYS[6]) until a
-- replica that declares it and serves its queue claims, which puts such runs back at the head
-- of their ready lists first (one whose queue or priority was damaged meanwhile goes to the
-- dead letters as corrupt instead). The replicas that declare it are woken at once
-- (wake-replica:<id>): the queue's wake marker this call consumed was meant for them. A run of
-- the replica's own route (@<replica id>: an every-replica fire's run, see promote_due.lua) is
-- the only one no other replica may take: when this replica no longer declares its job, it is
-- skipped (`undeclared`). When the replica's declarations are not in Redis (they expired
-- while Redis stalled), nothing is claimed: the replica publishes them and claims again.
--
-- A popped run is skipped (and recorded) when its job is paused or another run holds its
-- fingerprint (a duplicate). A job with a limit (`overlap = "forbid"`: 1; `max_concurrency`)
-- keeps its runs' slots in running:<job>; a run that finds every slot taken waits in
-- waiting:<job> until one is freed (fill_job_slots in common.lua), except a cron fire of a
-- `forbid` job, claimed for the first time, while a run of its job that had started by the
-- fire's due time still runs: that fire is skipped as an overlap. A cron fire's first attempt
-- that would start later than the misfire threshold, or after its job's next fire for the same
-- target came due, is judged again by its job's policy (missed_at_start in common.lua, with
-- {ns}:latest-fire and the run's next_due_ms): skipped as `missed` when the policy says so,
-- freeing the slot it was handed for the next waiting run. The rest start: their
-- attempt is counted and their lease recorded in the active set.
--
-- A run the promoter moved ahead of its due time (its lead) is claimed ahead: its worker waits
-- the time left, measured on Redis's clock and returned here, before it starts the run; the
-- lease and the job's slot cover that wait. When its job has no free slot at claim, the run
-- holding it may still end before this one's due time: the run is claimed without a slot, and
-- its worker takes one when the time comes (take_job_slot.lua), or the run waits or is skipped
-- then, as it would have been had it been claimed at its due time.
--
-- KEYS[1] active  zset    run id -> lease deadline ms
-- KEYS[2] events  stream  run state changes
-- KEYS[3] paused  set     paused job names
-- KEYS[4] dead    zset    run id -> ms it died
-- KEYS[5] replica-jobs:<replica id>  hash  job -> content hash of the jobs this replica declares
-- KEYS[6] undeclared-jobs            zset  job -> ms since when its put-aside runs wait
-- KEYS[7] replicas                   zset  replica id -> last heartbeat ms
-- KEYS[8] hold  string  set while the namespace is held (redcron hold): nothing is written
-- KEYS[9] rewind  hash  written_ms: the time of the latest claim that started or skipped runs
--                       or success recorded, never below one a replica saw; rewound_ms: when a
--                       claim last found Redis older than its replica saw it
-- ARGV[1] key prefix "{ns}:" for run:<id>, ready-fires:<queue>:<priority>, ready:<queue>:<priority>,
--         wake:<queue>, ready-queues, fp:<fingerprint>, running:<job>, waiting:<job>,
--         undeclared:<job>, replicas, replica-jobs:<replica id>, wake-replica:<replica id>,
--         latest-fire
-- ARGV[2] lease, ms
-- ARGV[3] fingerprint ttl, ms
-- ARGV[4] most runs popped by this call (skipped ones included)
-- ARGV[5] events stream MAXLEN (approximate), ' archive' after it when the namespace archives
-- ARGV[6] retention of finished run hashes, ms
-- ARGV[7] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[8] lease of a run claimed ahead, ms past its due time: short, so that a run whose
--         replica dies before starting it is reaped soon; its worker extends it when it starts
-- ARGV[9] the written_ms this replica's last claim answered (its own view of Redis's data), or
--         '' before its first claim
-- ARGV[10] W, the number of idle workers
-- ARGV[11..10+W] their worker ids "<replica id>/<slot>", one run each at most
-- ARGV[11+W..] the queues served, and the replica's own route @<replica id>
--
-- Redis comes back older than a replica saw it when it is restored from an older copy, fails
-- over to a replica that lagged, or loses its last writes in a crash: then written_ms is below
-- what that replica's last claim answered, and the claim records it (rewound_ms). A run that
-- started before that may have ended in the writes Redis lost, so it skips no fire as an overlap
-- (running_since in common.lua): the fire waits for the slot instead.
--
-- Returns {status, written_ms, 1 when this call found Redis older than the replica saw it or 0,
-- S, then S pairs of job and reason of the runs skipped or buried on the way,
-- R, then when R > 0 Redis's clock at the end of the call (ms) and R groups of (run id, worker
-- id, job, attempt, max attempts, fire ms or nil, payload or nil, ms to wait before starting it,
-- counted from that clock, and what its worker must do before starting it: 0 nothing, 1 take
-- a slot of its job or skip it as an overlap (a first claim of a cron fire of a `forbid` job),
-- 2 take a slot or wait for one, then 1 when this is the fire's first claim, whose start measures
-- how late the fire ran (a retry, a run handed back or re-driven, an ad-hoc run: 0), and when
-- the run was created (ms, nil if damaged): an ad-hoc run's stand-in for a fire time)}.
-- Status 'EMPTY': the ready lists ran dry; 'MORE': runs are left (every worker got one, or the
-- pop limit went to skipped runs); 'UNDECLARED' (alone): the replica's declarations
-- are missing.
-- Cost: O(limit + queues + jobs with runs put aside + replicas x jobs put aside by this call).
check_types('claim_runs', KEYS, {'zset', 'stream', 'set', 'zset', 'hash', 'zset', 'zset',
  'hold', 'hash'})
-- What a worker does before starting a run claimed ahead (the last value of each claimed run).
local SLOT_NONE, SLOT_TAKE_OR_SKIP, SLOT_TAKE_OR_WAIT = 0, 1, 2
-- How many values each claimed run is answered with: ClaimedRun::REPLY_FIELDS on the Rust side,
-- which a test compares with this.
local REPLY_FIELDS = 11

local active, events, paused, dead, declared, undeclared_jobs, replicas_key = KEYS[1], KEYS[2],
  KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local prefix = ARGV[1]
local lease, fingerprint_ttl, limit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local history, retention = history_of(prefix, ARGV[5]), tonumber(ARGV[6])
local worker_count = tonumber(ARGV[10])
local ahead_lease = tonumber(ARGV[8])
if not lease or not fingerprint_ttl or not limit or not history or not retention or not worker_count
    or not ahead_lease then
  return redis.error_reply('ERR claim_runs: lease, ttl, limit, maxlen, retention, ahead lease and worker count must be numbers')
end
-- A replica's wake marker outlives no replica: it expires if nothing consumes it.
local WAKE_REPLICA_TTL_MS = 60000
local now = now_ms(ARGV[7])
local now_text, lease_deadline = tostring(now), tostring(now + lease)
local workers, queues = {}, {}
for i = 11, 10 + worker_count do
  workers[#workers + 1] = ARGV[i]
end
for i = 11 + worker_count, #ARGV do
  queues[#queues + 1] = ARGV[i]
end

if redis.call('EXISTS', declared) == 0 then
  return {'UNDECLARED'}
end
check_type('claim_runs', key_latest_fires(prefix), 'hash')
local serves = {}
for _, queue in ipairs(queues) do
  serves[queue] = true
  -- The lists this call pops and the marker it sets, checked before its first write (below).
  check_type('claim_runs', key_wake(prefix, queue), 'zset')
  for _, priority in ipairs({'high', 'normal', 'low'}) do
    check_type('claim_runs', ready_list(prefix, 'cron', queue, priority), 'list')
    check_type('claim_runs', ready_list(prefix, 'adhoc', queue, priority), 'list')
  end
end

local rewind = KEYS[9]
local seen = tonumber(ARGV[9]) or 0
local written = tonumber(redis.call('HGET', rewind, 'written_ms')) or 0
local rewound = seen > written
if rewound then
  -- Raised past what this replica saw, so that it finds this rewind once only.
  written = math.max(seen, now)
  redis.call('HSET', rewind, 'rewound_ms', now, 'written_ms', written)
end

-- Runs put aside for a replica that declares their job: this one declares it and serves its
-- queue, so they go back to the head of their ready lists, oldest first, before any pop.
for _, job in ipairs(redis.call('ZRANGE', undeclared_jobs, 0, -1)) do
  local aside = key_undeclared(prefix, job)
  if redis.call('HEXISTS', declared, job) == 1 then
    local run_ids = redis.call('LRANGE', aside, 0, -1)
    local kept, back, corrupt = {}, {}, {}
    for _, run_id in ipairs(run_ids) do
      local kind, queue, priority = unpack(redis.call('HMGET', key_run(prefix, run_id), 'kind',
        'queue', 'priority'))
      if not routable(queue, priority) then
        -- Damaged while it was put aside: dead as corrupt, as promote_due.lua buries a run
        -- coming due so, rather than pushed to a ready list no claim reads.
        corrupt[#corrupt + 1] = run_id
      elseif serves[queue] then
        back[#back + 1] = {ready_list(prefix, kind, queue, priority), run_id, queue}
      else
        kept[#kept + 1] = run_id
      end
    end
    for _, run_id in ipairs(corrupt) do
      bury_corrupt_run(prefix, key_run(prefix, run_id), run_id, job, now, dead, events, history)
    end
    -- Pushed to the heads newest first, so that the oldest ends up first.
    for i = #back, 1, -1 do
      note_ready_queue(back[i][3], prefix)
      redis.call('LPUSH', back[i][1], back[i][2])
    end
    keep_aside(aside, kept, undeclared_jobs, job)
  end
end

local declares, declares_known = once_per_call(function(job)
  return redis.call('HEXISTS', declared, job) == 1
end)

-- At each priority, the fires of every queue served come before any ad-hoc run: a backlog of
-- tasks in one queue must not delay the schedule of another.
local ready_lists = {}
for _, priority in ipairs({'high', 'normal', 'low'}) do
  for _, kind in ipairs({'cron', 'adhoc'}) do
    for _, queue in ipairs(queues) do
      ready_lists[#ready_lists + 1] = ready_list(prefix, kind, queue, priority)
    end
  end
end

-- Pops up to `count` ids from the first non-empty list, in priority order. Lists found empty
-- stay empty for the rest of the call: nothing else runs meanwhile.
local first_list = 1
local function pop(count)
  while first_list <= #ready_lists do
    local run_ids = redis.call('LPOP', ready_lists[first_list], count)
    if run_ids then
      return run_ids
    end
    first_list = first_list + 1
  end
  return {}
end

local skips = {}
local told_missed = {}  -- job -> true once one of its missed fires in this call sent a notice
local function skip(run_key, run_id, job, reason)
  -- Fires found missed as they start come one after another: one notice per job says so.
  skip_run(prefix, run_key, run_id, job, reason, now, retention, events, history,
    reason == 'missed' and told_missed[job])
  if reason == 'missed' then
    told_missed[job] = true
  end
  skips[#skips + 1] = job
  skips[#skips + 1] = reason
end

-- Takes a lock for `holder`, or finds it already held by that same holder (a retry).
local function lock(key, holder, ttl)
  if redis.call('SET', key, holder, 'NX', 'PX', ttl) then
    return true
  end
  return redis.call('GET', key) == holder
end

-- Takes (or keeps, when it was handed this run) a slot of `job` for the run until `deadline`.
-- A free slot is found first, with the count alone: a run handed a slot fills one, so only a
-- job whose slots are full asks whether this run holds one.
local function take_slot(running, job, run_id, slots, deadline)
  fill_job_slots(prefix, job, now)
  if not job_slots_full(prefix, job, running, slots) or redis.call('ZSCORE', running, run_id) then
    redis.call('ZADD', running, deadline, run_id)
    return true
  end
  return false
end

local paused_job, paused_known = once_per_call(function(job)
  return redis.call('SISMEMBER', paused, job) == 1
end)

-- Reads the hashes of the runs one pop took, then whether their jobs not asked about yet in
-- this call are declared and paused, all of them with one HMGET and one SMISMEMBER, where a
-- call of many jobs' fires (a second of cron fires) asked once per job. Nothing the pops'
-- runs are judged by is written meanwhile: each run writes only its own hash, and the runs
-- handed a slot are waiting ones, never one just popped.
local RUN_FIELDS = {'job', 'fingerprint', 'overlap', 'created_ms', 'attempt', 'max_attempts',
  'fire_ms', 'payload', 'due_ms', 'kind', 'max_concurrency', 'started_ms', 'redriven_ms',
  'notify', 'notify_on', 'late_after_ms', 'missed_after_ms', 'misfire', 'next_due_ms',
  'starting'}
local function read_popped(run_ids)
  local records, asked, jobs = {}, {}, {}
  for index, run_id in ipairs(run_ids) do
    records[index] = redis.call('HMGET', key_run(prefix, run_id), unpack(RUN_FIELDS))
    local job = records[index][1]
    if job and declares_known[job] == nil and not asked[job] then
      asked[job] = true
      jobs[#jobs + 1] = job
    end
  end
  for first = 1, #jobs, SLICE do
    local slice = {unpack(jobs, first, math.min(first + SLICE - 1, #jobs))}
    local hashes = redis.call('HMGET', declared, unpack(slice))
    local pauses = redis.call('SMISMEMBER', paused, unpack(slice))
    for index, job in ipairs(slice) do
      declares_known[job] = hashes[index] ~= false
      paused_known[job] = pauses[index] == 1
    end
  end
  return records
end

-- Attempt numbers as text, formatted once per call (see now_ms in common.lua).
local attempt_text = once_per_call(tostring)

local set_aside = {}
local started = {}
local leases = {}
local pops = 0
while #started < #workers and pops < limit do
  local run_ids = pop(math.min(#workers - #started, limit - pops))
  if #run_ids == 0 then
    break
  end
  pops = pops + #run_ids
  local records = read_popped(run_ids)
  for index, run_id in ipairs(run_ids) do
    local run_key = key_run(prefix, run_id)
    local job, fingerprint, overlap, created, attempt, max_attempts, fire_ms, payload, due_ms, kind,
      max_concurrency, started_ms, redriven_ms, notify, notify_on, late_after, missed_after,
      misfire, next_due, starting = unpack(records[index], 1, #RUN_FIELDS)
    attempt, max_attempts = tonumber(attempt), tonumber(max_attempts)
    local due = tonumber(due_ms) or now
    local wait = math.max(due - now, 0)
    local held_for = wait == 0 and lease or wait + ahead_lease
    local slots = job_limit(overlap, max_concurrency)
    -- Only a fire's own first claim may be skipped as an overlap: retries, runs handed back and
    -- re-driven runs are due at another time than their fire, and ad-hoc runs are never skipped.
    local first_claim = kind == 'cron' and not started_ms and not redriven_ms
    local may_skip = overlap == 'forbid' and first_claim
    local slot_pending, admitted = SLOT_NONE, false
    -- The fingerprint's owner is this run as created (its retries included), not just its id: a
    -- cron fire planned again after its hash expired has the same id but is a duplicate.
    if not job or not attempt or not max_attempts then
      -- A ready id whose hash is gone, was never written, or is damaged: nothing can run it.
      -- Checked before any further write, since an error would leave the popped run nowhere.
      bury_corrupt_run(prefix, run_key, run_id, job or '', now, dead, events, history)
      skips[#skips + 1] = job or ''
      skips[#skips + 1] = 'corrupt'
    elseif not declares(job) and slot_name(job, run_id) ~= job then
      -- A run of this replica's own route (an every-replica job's) whose job it no longer
      -- declares: no other replica may run it.
      skip(run_key, run_id, job, 'undeclared')
    elseif not declares(job) then
      -- Left for a replica that declares the job; since when, for the dead letters' grace.
      redis.call('RPUSH', key_undeclared(prefix, job), run_id)
      redis.call('ZADD', undeclared_jobs, 'NX', now, job)
      set_aside[job] = true
    elseif paused_job(job) then
      skip(run_key, run_id, job, 'paused')
    elseif missed_at_start(prefix, job, kind, attempt == 0, redriven_ms, fire_ms, missed_after,
        misfire, next_due, now) then
      -- It ran nothing: the start and worker a claim ahead handed back left are not its (as
      -- take_job_slot.lua clears them when it skips one).
      redis.call('HDEL', run_key, 'worker', 'started_ms', 'starting')
      skip(run_key, run_id, job, 'missed')
      -- A run handed a freed slot (fill_job_slots) holds it: the next waiting run takes it.
      if slots then
        free_job_slot(prefix, slot_name(job, run_id), run_id, now)
      end
    elseif fingerprint and fingerprint ~= '' and not lock(key_fingerprint(prefix, fingerprint), run_id .. '/' .. (created or ''), fingerprint_ttl) then
      skip(run_key, run_id, job, 'duplicate')
    elseif slots and not take_slot(key_running(prefix, slot_name(job, run_id)),
        slot_name(job, run_id), run_id, slots, now + held_for) then
      if wait > 0 then
        slot_pending = may_skip and SLOT_TAKE_OR_SKIP or SLOT_TAKE_OR_WAIT
      elseif may_skip and running_since(prefix, key_running(prefix, slot_name(job, run_id)), due) then
        skip(run_key, run_id, job, 'overlap')
      else
        wait_for_slot(prefix, run_key, run_id, slot_name(job, run_id))
      end
      admitted = slot_pending ~= SLOT_NONE
    else
      admitted = true
    end
    if admitted then
      started[#started + 1] = {run_id, workers[#started + 1], job, attempt + 1, max_attempts,
        tonumber(fire_ms) or false, payload, wait, slot_pending, first_claim and 1 or 0,
        tonumber(created) or false, run_key,
        notify and {notify, notify_on, tonumber(late_after) or 0, due}, starting}
      leases[#leases + 1] = wait == 0 and lease_deadline or tostring(now + held_for)
      leases[#leases + 1] = run_id
    end
  end
end

-- Wakes the replicas that declare a job whose runs this call put aside (a few replicas: one
-- check each).
if next(set_aside) then
  local replicas = redis.call('ZRANGE', replicas_key, 0, -1)
  for job in pairs(set_aside) do
    for _, replica in ipairs(replicas) do
      if redis.call('HEXISTS', key_replica_jobs(prefix, replica), job) == 1 then
        local marker = key_wake_replica(prefix, replica)
        redis.call('ZADD', marker, 0, 'ready')
        redis.call('PEXPIRE', marker, WAKE_REPLICA_TTL_MS)
      end
    end
  end
end

-- Only a call that started or skipped runs moves written_ms: an idle claim stays a read.
if #started > 0 or #skips > 0 then
  written = math.max(written, now)
  redis.call('HSET', rewind, 'written_ms', written)
end

-- Every worker may have got a run and no run be left: the lists tell, not the count (a bound
-- that grows while runs wait must not grow for a load that just fills it).
while first_list <= #ready_lists and redis.call('LLEN', ready_lists[first_list]) == 0 do
  first_list = first_list + 1
end
local reply = {first_list > #ready_lists and 'EMPTY' or 'MORE', written, rewound and 1 or 0,
  #skips / 2}
for _, value in ipairs(skips) do
  reply[#reply + 1] = value
end
reply[#reply + 1] = #started
if #started == 0 then
  return reply
end

-- Starting is not an event: the run hash says who runs which attempt since when, and the
-- outcome's event names the worker.
in_slices('ZADD', active, leases)
local claimed_ahead = false
for _, run in ipairs(started) do
  local wait = run[8]
  claimed_ahead = claimed_ahead or wait > 0
  -- One write of the hash per run: a run claimed ahead is not running until its worker starts
  -- it (extend_lease.lua or take_job_slot.lua write its real start), so that an outage at its
  -- due time delays that start and a fire due meanwhile is not skipped as its overlap. The
  -- mark of an earlier claim ahead, handed back, is dropped only where the hash holds one.
  if wait > 0 then
    redis.call('HSET', run[12], 'attempt', attempt_text(run[4]), 'state', 'active',
      'worker', run[2], 'started_ms', tostring(now + wait), 'starting', '1')
  else
    redis.call('HSET', run[12], 'attempt', attempt_text(run[4]), 'state', 'active',
      'worker', run[2], 'started_ms', now_text)
    if run[14] then
      redis.call('HDEL', run[12], 'starting')
    end
  end
  -- A late start is told now, by the replica that starts it, not when the run ends.
  local notices = run[13]
  if notices and now + wait - notices[4] > notices[3] then
    add_notice(prefix, run[12], run[1], 'late', now, notices[1], notices[2], replica_of(run[2]))
  end
end
-- Runs may be left behind the ones claimed: wake other replicas' idle workers for them. The
-- lists before first_list were found empty, and a run pushed onto one since (handed a freed
-- slot, a workflow's next step) woke its queue as it was pushed: only the others are looked at,
-- none when every list ran dry.
local position = {}
for index, list in ipairs(ready_lists) do
  position[list] = index
end
local function left_in(list)
  return position[list] >= first_list and redis.call('LLEN', list) > 0
end
for _, queue in ipairs(queues) do
  for _, priority in ipairs({'high', 'normal', 'low'}) do
    if left_in(ready_list(prefix, 'cron', queue, priority))
        or left_in(ready_list(prefix, 'adhoc', queue, priority)) then
      redis.call('ZADD', key_wake(prefix, queue), 0, 'ready')
      break
    end
  end
end

-- Waits count from the end of this call, the closest Redis gets to when the worker reads them:
-- a long call must not make every run it claimed ahead start that much late.
local end_ms = claimed_ahead and now_ms(ARGV[7]) or now
local elapsed = end_ms - now
reply[#reply + 1] = end_ms
for _, run in ipairs(started) do
  run[8] = math.max(run[8] - elapsed, 0)
  for i = 1, REPLY_FIELDS do
    reply[#reply + 1] = run[i]
  end
end

return reply
