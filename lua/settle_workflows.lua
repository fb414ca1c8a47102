-- Settles the steps of running instances whose runs ended without telling their instance: a
-- run acked, buried or skipped by a replica of a version that knows no workflows (during a
-- rolling deploy), or a run whose hash is gone. Each such step is recorded as its run ended, and
-- its instance advanced; an instance that is gone or has ended leaves the running index. Every
-- replica's reaper calls it for a page of that index at each tick; a step is settled once, as
-- only a step still queued is.
--
-- KEYS[1] workflows-running  zset  instance id -> ms started
-- KEYS[2] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for wf:<id>, run:<id>, ready:<queue>:<priority>, wake:<queue>,
--         ready-queues
-- ARGV[2] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[3..] instance ids
--
-- Returns the number of steps settled.
-- Cost: O(steps of the instances given).
check_types('settle_workflows', KEYS, {'zset', 'hold'})
local running = KEYS[1]
local prefix = ARGV[1]
local now = now_ms(ARGV[2])
local OUTCOME = {succeeded = 'succeeded', dead = 'failed', skipped = 'skipped'}

for i = 3, #ARGV do
  check_type('settle_workflows', key_workflow(prefix, ARGV[i]), 'hash')
end
local settled = 0
for i = 3, #ARGV do
  local workflow_id = ARGV[i]
  local wf_key = key_workflow(prefix, workflow_id)
  local state, step_list = unpack(redis.call('HMGET', wf_key, 'state', 'steps'))
  if state ~= 'running' then
    redis.call('ZREM', running, workflow_id)
  else
    for _, step in ipairs(names_in(step_list)) do
      if redis.call('HGET', wf_key, 'status:' .. step) == 'queued' then
        local run_key = key_run(prefix, current_step_run(wf_key, workflow_id, step))
        local run_state, output = unpack(redis.call('HMGET', run_key, 'state', 'output'))
        if OUTCOME[run_state] then
          workflow_step_ended(prefix, run_key, OUTCOME[run_state], output or '', now)
          settled = settled + 1
        elseif not run_state then
          redis.call('HSET', wf_key, 'status:' .. step, 'failed', 'at:' .. step, now,
            'error:' .. step, 'its run is gone: its record expired or was deleted')
          advance_workflow(prefix, workflow_id, now)
          settled = settled + 1
        end
      end
    end
  end
end
return settled
