-- Puts back the runs of one page of run hashes that are in none of the lists their state says
-- they are in: a run `ready` in neither its ready list nor undeclared:<job>, `waiting` not in
-- waiting:<job>, `scheduled` or `retrying` in neither due set, `active` not in the active set.
-- Every script moves a run between lists in one atomic step, so no run is ever found so between
-- two of them; one is only after a script failed halfway (Redis keeps the writes made before the
-- error), a restore, or a hand edit, and it would wait forever, never run and never told. A
-- ready run goes to the head of its ready list (it is late already), a waiting one back to the
-- end of its job's waiting list (handed a slot if one is free), a due one into its kind's due
-- set (a cron fire's `due`, an ad-hoc run's `due-runs`) at its due time, an active one into the active set with a short lease from now: its worker, if
-- it still runs it, extends that lease; if not, the reaper takes it for lost when it expires.
-- A ready run whose queue or priority names no ready list a claim reads (damaged since it came
-- due) goes to the dead letters as corrupt instead, wherever it is but undeclared:<job>, as
-- promote_due.lua buries one coming due so: in such a list it would wait unseen, and as a stray
-- it would be put there.
-- A hash that is not a run's (another type, no state) is left to the operator: it is no run.
--
-- The page is the run ids of one step of the reapers' walk over the namespace's keys (the
-- same page whose damaged records expire_damaged_keys.lua looks at).
--
-- KEYS[1] active  zset    run id -> lease deadline ms
-- KEYS[2] due     zset    run id -> due ms
-- KEYS[3] events  stream  run state changes
-- KEYS[4] hold  string  set while the namespace is held (redcron hold): nothing is written
-- KEYS[5] due-runs  zset  run id -> due ms, of ad-hoc runs
-- ARGV[1] key prefix "{ns}:" for run:<id>, ready-fires:<queue>:<priority>, ready:<queue>:<priority>,
--         wake:<queue>, ready-queues, waiting:<job>, running:<job>, undeclared:<job>
-- ARGV[2] events stream MAXLEN (approximate), ' archive' after it when the namespace archives
-- ARGV[3] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[4..] the run ids of the page
--
-- Returns, for each run put back: run id, state, job; for each run buried: run id, 'dead', job.
-- Cost: O(ids) hashes read, plus for each ready or waiting run a search of its list, skipped
-- when that list is longer than MAX_SEARCHED (such a run is looked at again in the next cycle).
check_types('requeue_stray_runs', KEYS, {'zset', 'zset', 'stream', 'hold', 'zset'})
local active, due, events, due_runs = KEYS[1], KEYS[2], KEYS[3], KEYS[5]
local prefix = ARGV[1]
local history = history_of(prefix, ARGV[2])
if not history then
  return redis.error_reply('ERR requeue_stray_runs: maxlen must be a number')
end
local now = now_ms(ARGV[3])
-- How long a list may be for a run to be searched in it: LPOS reads it whole.
local MAX_SEARCHED = 10000
-- The lease of an active run put back: its worker extends it within a lease period if it runs.
local STRAY_LEASE_MS = 60000

-- Whether `run_id` is in `list`; nil when the list is too long to tell cheaply.
local function listed(list, run_id)
  check_type('requeue_stray_runs', list, 'list')
  if redis.call('LLEN', list) > MAX_SEARCHED then
    return nil
  end
  return redis.call('LPOS', list, run_id) ~= false
end

-- Read and checked whole before the first write (see check_type in common.lua).
local strays = {}
for i = 4, #ARGV do
  local run_id = ARGV[i]
  local run_key = key_run(prefix, run_id)
  local fields = redis.pcall('HMGET', run_key, 'state', 'job', 'kind', 'queue', 'priority',
    'due_ms')
  local state, job, kind, queue, priority, due_ms = false, false, false, false, false, false
  if not fields.err then
    state, job, kind, queue, priority, due_ms = unpack(fields, 1, 6)
  end
  local stray = nil
  if (state == 'scheduled' or state == 'retrying') and not redis.call('ZSCORE', due, run_id)
      and not redis.call('ZSCORE', due_runs, run_id) then
    stray = {run_id, state, job or '', due_ms, kind == 'cron' and due or due_runs}
  elseif state == 'active' and not redis.call('ZSCORE', active, run_id) then
    stray = {run_id, state, job or ''}
  elseif state == 'ready' and job and not routable(queue, priority)
      and listed(key_undeclared(prefix, job), run_id) == false then
    -- One put aside is buried by the claim that takes it back (claim_runs.lua).
    check_type('requeue_stray_runs', key_dead(prefix), 'zset')
    stray = {run_id, 'dead', job}
  elseif state == 'ready' and job then
    local list = ready_list(prefix, kind, queue, priority)
    local in_ready, aside = listed(list, run_id), listed(key_undeclared(prefix, job), run_id)
    if in_ready == false and aside == false then
      check_type('requeue_stray_runs', key_wake(prefix, queue), 'zset')
      stray = {run_id, state, job, list, queue}
    end
  elseif state == 'waiting' and job
      and listed(key_waiting(prefix, slot_name(job, run_id)), run_id) == false then
    check_job_keys('requeue_stray_runs', prefix, slot_name(job, run_id))
    stray = {run_id, state, job}
  end
  strays[#strays + 1] = stray
end

local reply = {}
for _, stray in ipairs(strays) do
  local run_id, state, job = stray[1], stray[2], stray[3]
  if state == 'scheduled' or state == 'retrying' then
    redis.call('ZADD', stray[5], tonumber(stray[4]) or now, run_id)
  elseif state == 'active' then
    redis.call('ZADD', active, now + STRAY_LEASE_MS, run_id)
  elseif state == 'dead' then
    bury_corrupt_run(prefix, key_run(prefix, run_id), run_id, job, now, key_dead(prefix), events,
      history)
  elseif state == 'ready' then
    note_ready_queue(stray[5], prefix)
    redis.call('LPUSH', stray[4], run_id)
    redis.call('ZADD', key_wake(prefix, stray[5]), 0, 'ready')
  else
    redis.call('RPUSH', key_waiting(prefix, slot_name(job, run_id)), run_id)
    fill_job_slots(prefix, slot_name(job, run_id), now)
  end
  if state ~= 'dead' then
    record_event(events, history, run_id, state, 'job', job, 'reason', 'stray')
  end
  reply[#reply + 1] = run_id
  reply[#reply + 1] = state
  reply[#reply + 1] = job
end
return reply
