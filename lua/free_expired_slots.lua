-- Hands the slots of every published job whose deadline passed, or that no run of the job holds,
-- to the job's waiting runs (fill_job_slots in common.lua). A claim, a start or an end of a run
-- of the job does so too; this call, from every reaper tick, is what frees them at their
-- deadline when no run of the job comes or ends: a handover never claimed (its run was lost
-- from its ready list), an entry written by something else.
--
-- KEYS[1] defs  hash    job -> published definition JSON: the jobs looked at
-- KEYS[2] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for run:<id>, running:<job>, waiting:<job>, ready:..., wake:<queue>,
--         ready-queues
-- ARGV[2] now override, ms, or '' for Redis's clock (tests only)
--
-- Returns how many entries left the waiting lists: runs handed a slot, and entries of runs no
-- longer waiting, dropped.
-- Cost: O(J) for J published jobs, plus O(limit) per job whose slots are full while runs wait,
-- plus the runs handed a slot.
check_types('free_expired_slots', KEYS, {'hash', 'hold'})
local defs = KEYS[1]
local prefix = ARGV[1]
local now = now_ms(ARGV[2])

local jobs = redis.call('HKEYS', defs)
-- Every job's slots and waiting runs are checked before the first write.
for _, job in ipairs(jobs) do
  check_job_keys('free_expired_slots', prefix, job)
end
local handed = 0
for _, job in ipairs(jobs) do
  local waiting = key_waiting(prefix, job)
  local before = redis.call('LLEN', waiting)
  if before > 0 then
    fill_job_slots(prefix, job, now)
    handed = handed + before - redis.call('LLEN', waiting)
  end
end
return handed
