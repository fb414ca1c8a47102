-- Creates an ad-hoc run of a declared job, due now or later, optionally unique: a second run
-- with the same fingerprint inside its window is refused and told which run holds it.
--
-- KEYS[1] due            zset    run id -> due ms
-- KEYS[2] defs           hash    job -> {"hash": ..., "job": definition} JSON
-- KEYS[3] paused         set     paused job names
-- KEYS[4] events         stream  run state changes
-- KEYS[5] wake-promoter  channel told when a run becomes due
-- ARGV[1] key prefix "{ns}:" for run:<id>, fp:<fingerprint>
-- ARGV[2] run id (time-ordered, unique)
-- ARGV[3] job name
-- ARGV[4] due, ms, or '' for now
-- ARGV[5] payload (JSON text, may be '')
-- ARGV[6] priority (high | normal | low), or '' for the job's own
-- ARGV[7] fingerprint, or '' when the run need not be unique
-- ARGV[8] uniqueness window, ms
-- ARGV[9] events stream MAXLEN (approximate)
-- ARGV[10] now override, ms, or '' for Redis's clock (tests only)
--
-- Returns {'OK', due ms, 1 if the job is paused else 0}, {'UNKNOWN'} for a job no replica has
-- declared, or {'DUPLICATE', run id holding the fingerprint}.
-- Cost: O(log N).
local due, defs, paused, events, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local prefix, run_id, job, due_arg = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local payload, priority, fingerprint = ARGV[5], ARGV[6], ARGV[7]
local window, maxlen = tonumber(ARGV[8]), tonumber(ARGV[9])
if not window or not maxlen then
  return redis.error_reply('ERR enqueue_run: window and maxlen must be numbers')
end
local now = now_ms(ARGV[10])
local due_ms = tonumber(due_arg) or now

local ok, decoded = pcall(cjson.decode, redis.call('HGET', defs, job) or '')
local def = ok and type(decoded) == 'table' and decoded.job
if type(def) ~= 'table' or type(def.queue) ~= 'string' or type(def.priority) ~= 'string' then
  return {'UNKNOWN'}
end
if priority == '' then
  priority = def.priority
end

-- The owner matches what claim_run checks, so the run's own claim passes its reservation.
local owner = run_id .. '/' .. now
if fingerprint ~= '' then
  local key = prefix .. 'fp:' .. fingerprint
  if not redis.call('SET', key, owner, 'NX', 'PX', window) then
    local holder = redis.call('GET', key) or ''
    return {'DUPLICATE', (string.gsub(holder, '/%d+$', ''))}
  end
end

local function number_or(value, default)
  return type(value) == 'number' and value or default
end
redis.call('HSET', prefix .. 'run:' .. run_id,
  'job', job, 'kind', 'adhoc', 'due_ms', due_ms, 'created_ms', now,
  'attempt', 0, 'max_attempts', number_or(def.retries, 0) + 1,
  'queue', def.queue, 'priority', priority,
  'backoff_ms', number_or(def.backoff, 30000), 'max_backoff_ms', number_or(def.max_backoff, 3600000),
  'delivery', type(def.delivery) == 'string' and def.delivery or 'at-least-once',
  'overlap', type(def.overlap) == 'string' and def.overlap or 'forbid',
  'fingerprint', fingerprint, 'payload', payload, 'state', 'scheduled')
redis.call('ZADD', due, due_ms, run_id)
record_event(events, maxlen, run_id, 'scheduled', 'job', job, 'due_ms', due_ms)
redis.call('PUBLISH', wake, due_ms)
return {'OK', due_ms, redis.call('SISMEMBER', paused, job)}
