-- Skips the runs of every-replica fires that wait in the own route of a replica that is gone:
-- it has not beaten (or it stopped) for the misfire threshold, and the run is due longer ago
-- than that. A replica back within the threshold of a run's due time runs it; one stopped for
-- good keeps no run waiting for ever. Only the runs' own replica claims from its route, so no
-- other replica may run them instead.
--
-- KEYS[1] replicas          zset    replica id -> last heartbeat ms
-- KEYS[2] stopped-replicas  zset    replica id -> ms it stopped cleanly
-- KEYS[3] events            stream  run state changes
-- KEYS[4] hold              string  set while the namespace is held (redcron hold): nothing is
--                                   written
-- ARGV[1] key prefix "{ns}:" for run:<id>, ready-fires:@<replica>:<priority>
-- ARGV[2] misfire threshold, ms
-- ARGV[3] events stream MAXLEN (approximate), ' archive' after it when the namespace archives
-- ARGV[4] retention of finished run hashes, ms
-- ARGV[5] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[6] limit: most runs looked at per list
--
-- Replicas gone for longer than the retention are not looked at any more: their runs were
-- skipped by then, and the `replicas` zset keeps every id that ever beat.
--
-- A job that asks for `skipped` notices gets one per call for its runs skipped here, as a
-- promotion tells once per job of the fires it skips together.
--
-- Returns {run id, job, replica} for each run skipped (reason `replica-down`).
-- Cost: O(replicas gone within the retention x 3 + limit per list).
check_types('skip_stranded_runs', KEYS, {'zset', 'zset', 'stream', 'hold'})
local replicas, stopped, events = KEYS[1], KEYS[2], KEYS[3]
local prefix, threshold = ARGV[1], tonumber(ARGV[2])
local history = history_of(prefix, ARGV[3])
local retention, limit = tonumber(ARGV[4]), tonumber(ARGV[6])
if not threshold or not history or not retention or not limit then
  return redis.error_reply('ERR skip_stranded_runs: threshold, maxlen, retention and limit must be numbers')
end
local now = now_ms(ARGV[5])
local gone_since = now - threshold

-- The replicas silent for the threshold: crashed (their last beat) or stopped (their stop).
local gone = {}
local forgotten = now - retention
for _, replica in ipairs(redis.call('ZRANGEBYSCORE', replicas, forgotten, '(' .. gone_since)) do
  gone[replica] = true
end
for _, replica in ipairs(redis.call('ZRANGEBYSCORE', stopped, forgotten, '(' .. gone_since)) do
  if not redis.call('ZSCORE', replicas, replica) then
    gone[replica] = true
  end
end
local lists = {}
for replica in pairs(gone) do
  for _, priority in ipairs({'high', 'normal', 'low'}) do
    local list = ready_list(prefix, 'cron', private_route(replica), priority)
    check_type('skip_stranded_runs', list, 'list')
    lists[#lists + 1] = {list, replica}
  end
end

local reply = {}
local told = {}  -- job -> true once one of its skips in this call was told
for _, entry in ipairs(lists) do
  local list, replica = entry[1], entry[2]
  for _, run_id in ipairs(redis.call('LRANGE', list, 0, limit - 1)) do
    local run_key = key_run(prefix, run_id)
    -- A record that is no hash (damaged) is left where it is, for the reaper's walk over the
    -- records: an error here would stop the sweep after its first writes.
    local fields = redis.pcall('HMGET', run_key, 'job', 'state', 'due_ms', 'attempt', 'starting',
      'reason')
    local job, state, due_ms, attempt, starting, last_reason = false, false, false, false, false,
      false
    if not fields.err then
      job, state, due_ms, attempt, starting, last_reason = unpack(fields, 1, 6)
    end
    if state == 'ready' and job and (tonumber(due_ms) or 0) < gone_since then
      redis.call('LREM', list, 1, run_id)
      if attempt == '0' and (starting == '1' or last_reason == 'not-started') then
        -- Claimed ahead and handed back before its start (its replica killed in between), it
        -- ran nothing: the start and worker of that claim are not its (as promote_due.lua
        -- clears them when it skips one).
        redis.call('HDEL', run_key, 'worker', 'started_ms', 'starting')
      end
      skip_run(prefix, run_key, run_id, job, 'replica-down', now, retention, events, history,
        told[job])
      told[job] = true
      reply[#reply + 1] = run_id
      reply[#reply + 1] = job
      reply[#reply + 1] = replica
    end
  end
end
return reply
