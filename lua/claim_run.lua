-- Claims the next ready run for a worker: strict priority order (high, then normal, then low)
-- across the queues it serves, after the checks that decide whether the run may start at all.
--
-- A popped run is skipped (and recorded) when its job is paused, when another run holds its
-- fingerprint (a duplicate), or when its job forbids overlap and a run of it is active. The
-- rest starts: its attempt is counted and its lease recorded in the active set.
--
-- KEYS[1] active  zset    run id -> lease deadline ms
-- KEYS[2] events  stream  run state changes
-- KEYS[3] paused  set     paused job names
-- KEYS[4] dead    zset    run id -> ms it died
-- ARGV[1] key prefix "{ns}:" for run:<id>, ready:<queue>:<priority>, wake:<queue>, fp:<fingerprint>,
--         busy:<job>
-- ARGV[2] worker id "<replica id>/<slot>"
-- ARGV[3] lease, ms
-- ARGV[4] fingerprint ttl, ms
-- ARGV[5] most runs popped by this call (skipped ones included)
-- ARGV[6] events stream MAXLEN (approximate)
-- ARGV[7] retention of finished run hashes, ms
-- ARGV[8] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[9..] the queues served
--
-- Returns {status, N, then N pairs of job and reason of the runs skipped or buried on the way}
-- followed, for status 'RUN', by the run id and its hash after the claim (field, value, ...).
-- Status 'EMPTY': every ready list is empty; 'MORE': the pop limit went to skipped runs (call
-- again).
-- Cost: O(limit + queues).
local active, events, paused, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, worker = ARGV[1], ARGV[2]
local lease, fingerprint_ttl, limit = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local maxlen, retention = tonumber(ARGV[6]), tonumber(ARGV[7])
if not lease or not fingerprint_ttl or not limit or not maxlen or not retention then
  return redis.error_reply('ERR claim_run: lease, ttl, limit, maxlen and retention must be numbers')
end
local now = now_ms(ARGV[8])
local queues = {}
for i = 9, #ARGV do
  queues[#queues + 1] = ARGV[i]
end

local function pop()
  for _, priority in ipairs({'high', 'normal', 'low'}) do
    for _, queue in ipairs(queues) do
      local run_id = redis.call('LPOP', prefix .. 'ready:' .. queue .. ':' .. priority)
      if run_id then
        return run_id
      end
    end
  end
  return nil
end

local skips = {}
local function skip(run_key, run_id, job, reason)
  skip_run(run_key, run_id, job, reason, now, retention, events, maxlen)
  skips[#skips + 1] = job
  skips[#skips + 1] = reason
end

local function reply(status, ...)
  local answer = {status, #skips / 2}
  for _, value in ipairs(skips) do
    answer[#answer + 1] = value
  end
  for _, value in ipairs({...}) do
    answer[#answer + 1] = value
  end
  return answer
end

-- Takes a lock for `holder`, or finds it already held by that same holder (a retry).
local function lock(key, holder, ttl)
  if redis.call('SET', key, holder, 'NX', 'PX', ttl) then
    return true
  end
  return redis.call('GET', key) == holder
end

-- Runs are left behind the one claimed: wake another idle worker for them.
local function wake_others()
  for _, queue in ipairs(queues) do
    for _, priority in ipairs({'high', 'normal', 'low'}) do
      if redis.call('LLEN', prefix .. 'ready:' .. queue .. ':' .. priority) > 0 then
        redis.call('ZADD', prefix .. 'wake:' .. queue, 0, 'ready')
        break
      end
    end
  end
end

for _ = 1, limit do
  local run_id = pop()
  if not run_id then
    return reply('EMPTY')
  end
  local run_key = prefix .. 'run:' .. run_id
  local job, fingerprint, overlap, created, attempt, max_attempts = unpack(redis.call('HMGET',
    run_key, 'job', 'fingerprint', 'overlap', 'created_ms', 'attempt', 'max_attempts'))
  -- The fingerprint's owner is this run as created (its retries included), not just its id: a
  -- cron fire planned again after its hash expired has the same id but is a duplicate.
  local owner = run_id .. '/' .. (created or '')
  if not job or not tonumber(attempt) or not tonumber(max_attempts) then
    -- A ready id whose hash is gone, was never written, or is damaged: nothing can run it.
    -- Checked before any further write, since an error would leave the popped run nowhere.
    bury_corrupt_run(run_key, run_id, job or '', now, dead, events, maxlen)
    skips[#skips + 1] = job or ''
    skips[#skips + 1] = 'corrupt'
  elseif redis.call('SISMEMBER', paused, job) == 1 then
    skip(run_key, run_id, job, 'paused')
  elseif fingerprint and fingerprint ~= '' and not lock(prefix .. 'fp:' .. fingerprint, owner, fingerprint_ttl) then
    skip(run_key, run_id, job, 'duplicate')
  elseif overlap == 'forbid' and not lock(prefix .. 'busy:' .. job, run_id, lease) then
    skip(run_key, run_id, job, 'overlap')
  else
    local attempt = redis.call('HINCRBY', run_key, 'attempt', 1)
    redis.call('ZADD', active, now + lease, run_id)
    redis.call('HSET', run_key, 'state', 'active', 'worker', worker, 'started_ms', now)
    record_event(events, maxlen, run_id, 'active', 'job', job, 'attempt', attempt, 'worker', worker)
    wake_others()
    return reply('RUN', run_id, unpack(redis.call('HGETALL', run_key)))
  end
end
return reply('MORE')
