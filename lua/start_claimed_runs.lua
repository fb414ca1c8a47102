#!lua flags=allow-oom
-- Starts runs claimed ahead of their due time, for the workers that hold them: extends each
-- one's short lease (and its slot in its job's limit) to the full lease and records its start
-- as now. The workers of a replica share one call for every run whose due time came while the
-- previous call was in flight, so the fires of one second start with a call or two, not one
-- each: the clock, the type check and the leases are paid once per call.
--
-- It declares every key it touches, so it runs while the namespace is held (`redcron hold`):
-- on a slot being migrated Redis runs it only where all of them are, and the runs claimed
-- ahead in a held namespace still start.
--
-- Redis runs it even out of memory (the flags line, allow-oom), as extend_lease.lua: a start
-- rewritten costs no memory, and one refused would leave the run's short lease to expire, and
-- the run to start late.
--
-- KEYS[1] active  zset  run id -> lease deadline ms
-- Then two keys per run, in the order of ARGV: its run:<id> (hash, the run) and the
-- running:<slot name> of its job (zset, run id -> deadline ms: the job's slots, when it has a
-- limit).
-- ARGV[1] lease, ms from now
-- ARGV[2] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[3..] pairs, one per run: run id, worker id that claimed it
--
-- Returns one number per run, in order: 1 when started, 0 when the run is no longer that
-- worker's (reaped) or its short lease has expired: its worker must not start it.
-- Cost: O(runs log N): per run one read and one write of its hash, the removal of its
-- `starting` mark and its slot's deadline; the leases of all of them in one ZADD.
check_type('start_claimed_runs', KEYS[1], 'zset')
local active = KEYS[1]
local lease = tonumber(ARGV[1])
-- A bound on one call's runs: unpack() of the leases is bounded by Lua's stack.
local MAX_RUNS = 1000
local count = (#ARGV - 2) / 2
if not lease or count ~= math.floor(count) or #KEYS ~= 1 + 2 * count or count > MAX_RUNS then
  return redis.error_reply('ERR start_claimed_runs takes a lease in ms, then a run id and a '
    .. 'worker for each run, with its two keys, for at most ' .. MAX_RUNS .. ' runs')
end
if count == 0 then
  return {}
end
local now = now_ms(ARGV[2])
local now_text, deadline_text = tostring(now), tostring(now + lease)

-- Everything is read before the first write: a run hash of another type refuses the call with
-- nothing written.
local run_ids = {}
for i = 3, #ARGV, 2 do
  run_ids[#run_ids + 1] = ARGV[i]
end
local deadlines = redis.call('ZMSCORE', active, unpack(run_ids))
local runs = {}
for index, run_id in ipairs(run_ids) do
  runs[index] = checked_read('start_claimed_runs', KEYS[2 * index], 'hash', 'HMGET',
    'worker', 'starting', 'overlap', 'max_concurrency')
end

local started, leases = {}, {}
for index, run_id in ipairs(run_ids) do
  local holder, starting, overlap, max_concurrency = unpack(runs[index], 1, 4)
  local deadline = tonumber(deadlines[index])
  -- A run claimed ahead starts only within its short lease: past it, its job's slot may have
  -- gone to a later fire (claims drop expired slots), and the reaper hands it back to be judged
  -- as late.
  if holder ~= ARGV[2 + 2 * index] or not deadline or deadline < now then
    started[index] = 0
  else
    started[index] = 1
    leases[#leases + 1], leases[#leases + 2] = deadline_text, run_id
    local run_key = KEYS[2 * index]
    redis.call('HSET', run_key, 'started_ms', now_text)
    if starting then
      redis.call('HDEL', run_key, 'starting')
    end
    -- A job without a limit keeps no slots, and a slot is never created here (XX). A key of
    -- another type holds no slot of this run (a claim refuses one before taking a slot), so
    -- its error is passed over rather than failing the runs written before it.
    if job_limit(overlap, max_concurrency) then
      redis.pcall('ZADD', KEYS[2 * index + 1], 'XX', deadline_text, run_id)
    end
  end
end
if #leases > 0 then
  redis.call('ZADD', active, 'XX', unpack(leases))
end
return started
