-- Helpers shared by every script: prepended to each script when it is loaded (see
-- src/store/scripts.rs), so each .lua file stays one atomic operation.

-- Milliseconds on Redis's own clock, so that replicas with skewed clocks agree on what is due
-- and what has expired. `override` (a number of milliseconds, or '') exists for tests.
local function now_ms(override)
  if override ~= nil and override ~= '' then
    return tonumber(override)
  end
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Appends one state change of a run to the capped events stream.
local function record_event(events, maxlen, run_id, state, ...)
  redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'run', run_id, 'state', state, ...)
end
