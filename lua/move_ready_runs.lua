-- Moves the ready runs of a queue that no live replica serves to its fallback queue (a
-- `[queues.<name>]` table): cron fires and ad-hoc runs of each priority, oldest first, after
-- the fallback's own, each run's hash saying its new queue. Runs not ready (due later, running,
-- waiting for a slot of their job) stay: they move once they are ready, if the queue is still
-- unserved.
--
-- KEYS[1..6]  list  the moved queue's lists, in pairs per priority (high, normal, low):
--                   ready-fires, then ready
-- KEYS[7..12] list  the fallback queue's lists, in the same order
-- KEYS[13]    wake:<fallback>  zset, one member: told that runs are ready
-- KEYS[14]    hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1]     key prefix "{ns}:" for run:<id>, ready-queues
-- ARGV[2]     the fallback queue's name
-- ARGV[3]     limit: most runs moved by this call
--
-- Returns how many runs were moved (call again while it returns the limit).
-- Cost: O(limit).
check_types('move_ready_runs', KEYS, {'list', 'list', 'list', 'list', 'list', 'list', 'list',
  'list', 'list', 'list', 'list', 'list', 'zset', 'hold'})
local prefix, fallback, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local moved = 0
for list = 1, 6 do
  if moved >= limit then
    break
  end
  local run_ids = redis.call('LPOP', KEYS[list], limit - moved)
  if run_ids then
    for _, run_id in ipairs(run_ids) do
      redis.call('HSET', key_run(prefix, run_id), 'queue', fallback)
    end
    in_slices('RPUSH', KEYS[list + 6], run_ids)
    moved = moved + #run_ids
  end
end
if moved > 0 then
  redis.call('ZADD', KEYS[13], 0, 'ready')
  note_ready_queue(fallback, prefix)
end
return moved
