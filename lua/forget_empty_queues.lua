-- Forgets, in the index of queues with ready runs, the queues whose six ready lists are all
-- empty, and may record that the index is whole. A reaper calls it when its walk over every key
-- of the namespace ends a round: every script that pushes a run onto a ready list adds its queue
-- to the index (note_ready_queue in common.lua), and the walk adds the queue of every ready list
-- it meets, so that lists written by a replica of an earlier version, which knew no index, are
-- found too. A queue is forgotten here only while none of its lists holds a run, in one call, so
-- a run pushed there after it is forgotten adds it again, and none before is lost.
--
-- KEYS[1] ready-queues         set     queues (and replicas' routes) whose lists may hold runs
-- KEYS[2] ready-queues-walked  string  ms the first walk of every key ended with the index
--                                      whole: readers trust the index from then on
-- KEYS[3] hold                 string  set while the namespace is held (redcron hold): nothing
--                                      is written
-- ARGV[1] key prefix "{ns}:" for ready-fires:<queue>:<priority>, ready:<queue>:<priority>
-- ARGV[2] '1' when every page of the round that ended added its queues, so the index is whole;
--         '' when a page failed to (the index is pruned all the same)
-- ARGV[3] now override, ms, or '' for Redis's clock (tests only)
--
-- Returns the queues forgotten.
-- Cost: O(queues in the index): one EXISTS of six lists each.
check_types('forget_empty_queues', KEYS, {'set', 'string', 'hold'})
local index, walked = KEYS[1], KEYS[2]
local prefix, whole = ARGV[1], ARGV[2] == '1'
local now = now_ms(ARGV[3])

local forgotten = {}
for _, queue in ipairs(redis.call('SMEMBERS', index)) do
  local lists = {}
  for _, priority in ipairs({'high', 'normal', 'low'}) do
    lists[#lists + 1] = ready_list(prefix, 'cron', queue, priority)
    lists[#lists + 1] = ready_list(prefix, 'adhoc', queue, priority)
  end
  -- A list key of another type (damaged) counts as holding runs: the queue stays named.
  if redis.call('EXISTS', unpack(lists)) == 0 then
    forgotten[#forgotten + 1] = queue
  end
end
in_slices('SREM', index, forgotten)
-- Written once: a walk that ends later finds it there and writes nothing, as it forgets nothing
-- while every queue in the index has runs.
if whole then
  redis.call('SET', walked, now, 'NX')
end
return forgotten
