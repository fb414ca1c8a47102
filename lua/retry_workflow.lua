-- Runs an instance again from the steps that failed or were skipped (`redcron workflow retry`):
-- each goes back to pending under a new run id (a dead run of it leaves the dead letters and
-- keeps its record for the retention), and the instance runs on from there as if they had not
-- ended, so the steps that never ran because of them run too. What resumes a step that has no dead run
-- to re-drive: one skipped because its job was paused, one whose job was declared by no live
-- replica when its turn came.
--
-- KEYS[1] dead  zset    run id -> ms it died
-- KEYS[2] hold  string  set while the namespace is held (redcron hold): nothing is written
-- KEYS[3] events  stream  where the retry is recorded (action `retry-workflow`, naming the
--         first step's new run and how many steps run again), with who asked
-- ARGV[1] key prefix "{ns}:" for wf:<id>, workflows-running, run:<id>, ready:..., wake:<queue>,
--         ready-queues
-- ARGV[2] instance id
-- ARGV[3] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[4] events stream MAXLEN (approximate)
-- ARGV[5] who asked (a console's token or user, `cli`), or '' when not told
--
-- Returns {'OK', step...} with the steps made pending again (none when nothing failed or was
-- skipped), {'MISSING'} when there is no such instance, or {'UNDECLARED', step, job} when no
-- live replica declares the job of a step to run again (its definition is not published): it
-- would fail again at once, so nothing is changed.
-- Cost: O(steps).
check_types('retry_workflow', KEYS, {'zset', 'hold', 'stream'})
local dead, events = KEYS[1], KEYS[3]
local maxlen, actor = tonumber(ARGV[4]), ARGV[5] or ''
local prefix, workflow_id = ARGV[1], ARGV[2]
local now = now_ms(ARGV[3])
local wf_key = key_workflow(prefix, workflow_id)

local step_list, retention = unpack(checked_read('retry_workflow', wf_key, 'hash', 'HMGET', 'steps',
  'retention_ms'))
check_type('retry_workflow', key_defs(prefix), 'hash')
check_type('retry_workflow', key_workflows_running(prefix), 'zset')
if not step_list then
  return {'MISSING'}
end
retention = tonumber(retention) or 604800000
local to_retry = {}
for _, step in ipairs(names_in(step_list)) do
  local status, job = unpack(redis.call('HMGET', wf_key, 'status:' .. step, 'job:' .. step))
  if status == 'failed' or status == 'skipped' then
    if not job or redis.call('HEXISTS', key_defs(prefix), job) == 0 then
      return {'UNDECLARED', step, job or ''}
    end
    to_retry[#to_retry + 1] = step
  end
end
local retried = {}
local first_run
for _, step in ipairs(to_retry) do
  -- The run before keeps its record (and its history) for the retention, out of the dead
  -- letters: the step runs again under a new id.
  local previous = current_step_run(wf_key, workflow_id, step)
  redis.call('ZREM', dead, previous)
  if redis.call('EXISTS', key_run(prefix, previous)) == 1 then
    redis.call('PEXPIRE', key_run(prefix, previous), retention)
  end
  local tries = redis.call('HINCRBY', wf_key, 'tries:' .. step, 1) + 1
  local run_id = step_run_id(workflow_id, step) .. '/' .. tries
  first_run = first_run or run_id
  redis.call('HSET', wf_key, 'status:' .. step, 'pending', 'at:' .. step, now, 'run:' .. step, run_id)
  redis.call('HDEL', wf_key, 'error:' .. step, 'output:' .. step)
  retried[#retried + 1] = step
end
if #retried > 0 then
  reopen_workflow(prefix, workflow_id)
  advance_workflow(prefix, workflow_id, now)
  record_action(events, maxlen, nil, 'retry-workflow', actor, first_run, #retried)
end
return {'OK', unpack(retried)}
