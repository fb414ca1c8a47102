-- Starts an instance of a workflow: its hash, with every step pending, and a run of each step
-- that needs none, in one call. Once per instance id: starting an id that exists is answered as
-- such and changes nothing, so a start that is retried (a cron fire's run lost and run again,
-- a client whose connection broke) never starts a second instance.
--
-- The steps are the workflow's as its job's published definition says (`defs`, the field
-- `workflow` of the canonical JSON), copied into the instance: a workflow changed by a deploy
-- changes the instances started after it, not the ones running. A replica that declares the
-- workflow while the published definition of its name is a job's (a deploy turning a job into
-- a workflow, or back) gives its own, which is used then: as any replica runs its own definition
-- of a job declared in several ways.
--
-- KEYS[1] workflows  zset    instance id -> ms started
-- KEYS[2] defs       hash    job -> definition JSON, published by the leader
-- KEYS[3] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for wf:<id>, workflows-running, run:<id>, ready:<queue>:<priority>,
--         wake:<queue>, ready-queues
-- ARGV[2] workflow name
-- ARGV[3] instance id
-- ARGV[4] payload: a JSON object's text, or '' for none
-- ARGV[5] how long a finished instance's hash is kept, ms
-- ARGV[6] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[7] the starting replica's own definition of the workflow's job (canonical JSON), or ''
--
-- Returns {'OK', ms started}; {'EXISTS', ms it was started}; {'UNKNOWN', ''} when no live
-- replica declares a workflow of that name, {'UNKNOWN', 'job'} when the name's published
-- definition is a job's (told here, from the same reading: a caller reading `defs` again could
-- find a workflow published since and call it a job); {'UNDECLARED', job} when no live replica
-- declares the job of one of its steps (nothing is written).
-- Cost: O(steps).
check_types('start_workflow', KEYS, {'zset', 'hash', 'hold'})
local workflows, defs = KEYS[1], KEYS[2]
local prefix, name, workflow_id, payload = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local retention = tonumber(ARGV[5])
if not retention then
  return redis.error_reply('ERR start_workflow: the retention must be a number')
end
local now = now_ms(ARGV[6])
local wf_key = key_workflow(prefix, workflow_id)

local started = checked_read('start_workflow', wf_key, 'hash', 'HGET', 'created_ms')
check_type('start_workflow', key_workflows_running(prefix), 'zset')
if started then
  return {'EXISTS', tonumber(started)}
end
local published = redis.call('HGET', defs, name)
local ok, def = pcall(cjson.decode, published or '')
local workflow = ok and type(def) == 'table' and def.workflow
-- A job's, as the client reads a published definition: one with no non-null "workflow".
local published_job = published and not (ok and type(def) == 'table' and def.workflow ~= nil
  and def.workflow ~= cjson.null)
if type(workflow) ~= 'table' and (ARGV[7] or '') ~= '' then
  local own_ok, own = pcall(cjson.decode, ARGV[7])
  workflow = own_ok and type(own) == 'table' and own.workflow
end
if type(workflow) ~= 'table' or type(workflow.steps) ~= 'table' or #workflow.steps == 0 then
  return {'UNKNOWN', published_job and 'job' or ''}
end
local names, fields = {}, {}
for _, step in ipairs(workflow.steps) do
  if type(step) ~= 'table' or type(step.name) ~= 'string' or type(step.job) ~= 'string'
      or type(step.needs) ~= 'table' then
    return {'UNKNOWN', ''}
  end
  if not decode_definition(redis.call('HGET', defs, step.job)) then
    return {'UNDECLARED', step.job}
  end
  local needs = {}
  for _, need in ipairs(step.needs) do
    needs[#needs + 1] = tostring(need)
  end
  names[#names + 1] = step.name
  for _, value in ipairs({'job:' .. step.name, step.job, 'needs:' .. step.name,
      table.concat(needs, ','), 'status:' .. step.name, 'pending'}) do
    fields[#fields + 1] = value
  end
end
redis.call('HSET', wf_key, 'name', name, 'state', 'running', 'created_ms', now,
  'on_failure', workflow.on_failure == 'continue' and 'continue' or 'stop',
  'retention_ms', retention, 'steps', table.concat(names, ','), unpack(fields))
if payload ~= '' then
  redis.call('HSET', wf_key, 'payload', payload)
end
redis.call('ZADD', workflows, now, workflow_id)
redis.call('ZADD', key_workflows_running(prefix), now, workflow_id)
-- The index forgets instances older than a finished one is kept.
redis.call('ZREMRANGEBYSCORE', workflows, '-inf', now - retention)
advance_workflow(prefix, workflow_id, now)
return {'OK', now}
