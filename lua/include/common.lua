-- Helpers shared by every script: prepended to each script when it is loaded (see
-- src/store/scripts.rs), so each .lua file stays one atomic operation.

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
