-- Ends the runs put aside for a replica that declares their job (see claim_runs.lua) once no
-- live replica has declared that job for `grace` (while a live replica declares it, the job's
-- clock starts again): a cron fire is skipped, as a fire of a job nobody declares any more; any
-- other run (a task, a retry of a fire) goes to the dead letters, where it can be re-driven.
-- Both with reason 'undeclared'. The fires of jobs a replica withdrew from its files (ARGV[7..],
-- when no live replica declares them) are skipped at once; their other runs wait out the grace,
-- as a replica may declare the job again.
--
-- KEYS[1] undeclared-jobs  zset    job -> ms since when no live replica declares it
-- KEYS[2] replicas         zset    replica id -> last heartbeat ms
-- KEYS[3] dead             zset    run id -> ms it died
-- KEYS[4] events           stream  run state changes
-- KEYS[5] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for run:<id>, undeclared:<job>, replica-jobs:<replica id>
-- ARGV[2] grace, ms
-- ARGV[3] a replica is live when its last heartbeat is at most this old, ms
-- ARGV[4] events stream MAXLEN (approximate), ' archive' after it when the namespace archives
-- ARGV[5] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[6] retention of finished run hashes, ms
-- ARGV[7..] jobs withdrawn (see above)
--
-- Returns {job, runs ended, ...} for each job some of whose runs were ended.
-- Cost: O(J × R + runs buried) for J jobs with runs put aside and R live replicas.
check_types('bury_undeclared_runs', KEYS, {'zset', 'zset', 'zset', 'stream', 'hold'})
local undeclared_jobs, replicas, dead, events = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, grace, live_for = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local history = history_of(prefix, ARGV[4])
local retention = tonumber(ARGV[6])
if not grace or not live_for or not history or not retention then
  return redis.error_reply('ERR bury_undeclared_runs: grace, live time, maxlen and retention must be numbers')
end
local now = now_ms(ARGV[5])

local withdrawn = {}
for i = 7, #ARGV do
  withdrawn[ARGV[i]] = true
end

local live = redis.call('ZRANGEBYSCORE', replicas, now - live_for, '+inf')
local buried = {}
for _, job in ipairs(redis.call('ZRANGE', undeclared_jobs, 0, -1)) do
  local declared = false
  for _, replica in ipairs(live) do
    if redis.call('HEXISTS', key_replica_jobs(prefix, replica), job) == 1 then
      declared = true
      break
    end
  end
  local expired = not declared
    and tonumber(redis.call('ZSCORE', undeclared_jobs, job)) <= now - grace
  if declared then
    redis.call('ZADD', undeclared_jobs, now, job)
  elseif expired or withdrawn[job] then
    local aside = key_undeclared(prefix, job)
    local run_ids = redis.call('LRANGE', aside, 0, -1)
    local kept = {}
    for _, run_id in ipairs(run_ids) do
      local run_key = key_run(prefix, run_id)
      local kind, attempt = unpack(redis.call('HMGET', run_key, 'kind', 'attempt'))
      if kind == 'cron' and (tonumber(attempt) or 0) == 0 then
        skip_run(prefix, run_key, run_id, job, 'undeclared', now, retention, events, history)
      elseif expired then
        redis.call('HSET', run_key, 'state', 'dead', 'reason', 'undeclared', 'finished_ms', now,
          'error', 'no live replica declares job "' .. job .. '"')
        redis.call('ZADD', dead, now, run_id)
        record_event(events, history, run_id, 'dead', 'job', job, 'reason', 'undeclared')
        workflow_step_ended(prefix, run_key, 'failed', '', now)
      else
        kept[#kept + 1] = run_id
      end
    end
    keep_aside(aside, kept, undeclared_jobs, job)
    if #run_ids > #kept then
      buried[#buried + 1] = job
      buried[#buried + 1] = #run_ids - #kept
    end
  end
end
return buried
