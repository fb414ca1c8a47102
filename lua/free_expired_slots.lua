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
-- Cost: O(J) for J published jobs (one LLEN each), plus O(limit) per job whose slots are full while runs wait,
-- plus the runs handed a slot.
check_types('free_expired_slots', KEYS, {'hash', 'hold'})
local defs = KEYS[1]
local prefix = ARGV[1]
local now = now_ms(ARGV[2])

local jobs = redis.call('HKEYS', defs)
-- Every job's waiting runs are counted, and the slots of the jobs that have some checked,
-- before the first write. The count is the check of the waiting list (a read that refuses a key
-- of another type), and only a job with waiting runs has its slots written: one command per job
-- at most ticks, where a TYPE of each key and the count were three.
local waiting_runs = {}
for index, job in ipairs(jobs) do
  waiting_runs[index] = checked_read('free_expired_slots', key_waiting(prefix, job), 'list',
    'LLEN')
  if waiting_runs[index] > 0 then
    check_type('free_expired_slots', key_running(prefix, job), 'zset')
  end
end
local handed = 0
for index, job in ipairs(jobs) do
  local before = waiting_runs[index]
  if before > 0 then
    fill_job_slots(prefix, job, now)
    handed = handed + before - redis.call('LLEN', key_waiting(prefix, job))
  end
end
return handed
