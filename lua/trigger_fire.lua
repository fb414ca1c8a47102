-- Triggers a fire of an every-replica job (`on = "every"`) now: `redcron trigger` of such a job.
-- A fire of it runs once on each of its targets, so a trigger makes one run per target asked
-- for, as promote_due.lua makes a cron fire's: id <job>@<fire ms>:<replica>, waiting in that
-- replica's own route (ready-fires:@<replica>:<priority>) and counted in its slots
-- (<job>@<replica>, slot_name in common.lua), so that `overlap = "forbid"` holds per replica
-- for triggers as for fires. It is a cron fire at the time of the trigger (kind `cron`, marked
-- `triggered`): claimed while that replica's run of the job that started before it still runs,
-- it is skipped as an overlap, as a second fire would be. It carries no misfire policy: it is
-- due when made and is never judged missed, nor superseded by the job's next fire.
--
-- The targets are given (the caller reads which replicas are live); each must be a target of
-- the job (targets:<job>: it declares the job and matches its `where`, as its heartbeats keep
-- it). With mode `all` the replicas given that are not are left out; with mode `one` the one
-- replica given must be, or nothing is made.
--
-- The fire time is Redis's clock, moved on by a millisecond while that time is the job's own
-- fire (planned, due or made) or a trigger made in the same millisecond, so that a trigger
-- never takes a fire's id. A fire planned only later for that very millisecond (after an
-- outage with no leader) finds the trigger's runs there and is skipped as a duplicate for
-- those replicas.
--
-- Each run made carries who asked (`actor`, in the HSET that makes it), and a trigger told who
-- asked records it once in the events stream (`action` `trigger`, its first run and how many),
-- as a pause does: the job's page lists it.
--
-- KEYS[1] defs     hash    job -> definition JSON, published by the leader
-- KEYS[2] paused   set     paused job names
-- KEYS[3] due      zset    run id -> due ms, of the fires planned and not promoted
-- KEYS[4] planned  hash    job -> its fires planned and not promoted yet, ms, comma-separated
-- KEYS[5] hold     string  set while the namespace is held (redcron hold): nothing is written
-- KEYS[6] events   stream  run state changes, and operators' actions on jobs
-- ARGV[1] key prefix "{ns}:" for run:<id>, targets:<job>, ready-fires:@<replica>:<priority>,
--         wake:@<replica>, ready-queues
-- ARGV[2] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[3] job name
-- ARGV[4] payload (JSON text), or '' for none
-- ARGV[5] priority (high | normal | low), or '' for the job's own
-- ARGV[6] mode: 'all' (every replica given that is a target) or 'one' (the one replica given)
-- ARGV[7] who asked (a console's token or user, `cli`), or '' when not told: then nothing is
--         recorded of who
-- ARGV[8] events stream MAXLEN (approximate)
-- ARGV[9..] replica ids
--
-- Returns {'OK', fire ms, 1 if the job is paused else 0, then each run id made and its
-- replica}; {'UNKNOWN'} for a job no replica has declared; {'ONCE'} for a job whose fires run
-- once (not on every replica): its trigger is an ad-hoc run (enqueue_runs.lua); {'NOT-TARGET',
-- replica} (mode `one`) for a replica that does not declare the job or does not match it;
-- {'NO-TARGET'} (mode `all`) when none of the replicas given is a target.
-- Cost: O(replicas given + the job's planned fires), and one XADD when told who asked.
check_types('trigger_fire', KEYS, {'hash', 'set', 'zset', 'hash', 'hold', 'stream'})
local defs, paused, due, planned, events = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6]
local prefix, job, payload, priority, mode = ARGV[1], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local actor, maxlen = ARGV[7] or '', tonumber(ARGV[8])
-- Who asked, as the last fields of each run's HSET (none when not told).
local acting = actor ~= '' and {'actor', actor} or {}
if mode ~= 'all' and mode ~= 'one' then
  return redis.error_reply('ERR trigger_fire: mode must be all or one, not ' .. tostring(mode))
end
local now = now_ms(ARGV[2])

local def = decode_definition(redis.call('HGET', defs, job))
if not def then
  return {'UNKNOWN'}
end
if not def.every then
  return {'ONCE'}
end
if priority == '' then
  priority = def.priority
end
local targets_key = key_targets(prefix, job)
check_type('trigger_fire', targets_key, 'zset')
local targets = {}
for i = 9, #ARGV do
  local replica = ARGV[i]
  if redis.call('ZSCORE', targets_key, replica) then
    targets[#targets + 1] = replica
  elseif mode == 'one' then
    return {'NOT-TARGET', replica}
  end
end
if #targets == 0 then
  return {'NO-TARGET'}
end
for _, replica in ipairs(targets) do
  local route = private_route(replica)
  check_type('trigger_fire', ready_list(prefix, 'cron', route, priority), 'list')
  check_type('trigger_fire', key_wake(prefix, route), 'zset')
end

-- A millisecond that is no fire of the job and no earlier trigger's: a few tries at most.
local fires = {}
for _, fire in ipairs(planned_fires(redis.call('HGET', planned, job))) do
  fires[fire] = true
end
local function taken(fire_ms)
  local fire_id = cron_run_id(job, fire_ms)
  if fires[tostring(fire_ms)] or redis.call('ZSCORE', due, fire_id)
      or redis.call('EXISTS', key_run(prefix, fire_id)) == 1 then
    return true
  end
  for _, replica in ipairs(targets) do
    if redis.call('EXISTS', key_run(prefix, replica_run_id(fire_id, replica))) == 1 then
      return true
    end
  end
  return false
end
local fire_ms = now
while taken(fire_ms) do
  fire_ms = fire_ms + 1
end
local fire_text, now_text = tostring(fire_ms), tostring(now)

local reply = {'OK', fire_ms, redis.call('SISMEMBER', paused, job)}
for _, replica in ipairs(targets) do
  local run_id = replica_run_id(cron_run_id(job, fire_text), replica)
  local run_key = key_run(prefix, run_id)
  local route = private_route(replica)
  redis.call('HSET', run_key,
    'job', job, 'kind', 'cron', 'triggered', '1', 'fire_ms', fire_text, 'due_ms', fire_text,
    'created_ms', now_text, 'attempt', 0, 'max_attempts', def.retries + 1,
    'queue', route, 'priority', priority,
    'backoff_ms', def.backoff, 'max_backoff_ms', def.max_backoff,
    'delivery', def.delivery, 'overlap', def.overlap,
    'fingerprint', run_id, 'state', 'ready', 'ready_ms', now_text, unpack(acting))
  if def.max_concurrency then
    redis.call('HSET', run_key, 'max_concurrency', def.max_concurrency)
  end
  if payload ~= '' then
    redis.call('HSET', run_key, 'payload', payload)
  end
  set_run_notices(run_key, def.notify)
  note_ready_queue(route, prefix)
  redis.call('RPUSH', ready_list(prefix, 'cron', route, priority), run_id)
  redis.call('ZADD', key_wake(prefix, route), 0, 'ready')
  reply[#reply + 1] = run_id
  reply[#reply + 1] = replica
end
if actor ~= '' then
  record_action(events, maxlen, job, 'trigger', actor, reply[4], #targets)
end
return reply
