-- Lists the active runs that Redis says one replica's workers own, so the replica can compare
-- them with what it really runs: after Redis was restored from an older copy, failed over to a
-- replica that lagged, or lost a reply, a run can be active under a worker that is not running
-- it, and would hold its lease and its job's slot until the lease expires.
--
-- KEYS[1] active  zset    run id -> lease deadline ms
-- KEYS[2] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for run:<id>
-- ARGV[2] the replica's worker id prefix, "<replica id>/"
--
-- Returns {run id, worker id, attempt, ...} for each active run owned by one of its workers.
-- Cost: O(A) for A active runs (bounded by the workers of all replicas).
check_types('list_owned_runs', KEYS, {'zset', 'hold'})
local active = KEYS[1]
local prefix, workers = ARGV[1], ARGV[2]

local owned = {}
for _, run_id in ipairs(redis.call('ZRANGE', active, 0, -1)) do
  local worker, attempt = unpack(redis.call('HMGET', key_run(prefix, run_id), 'worker', 'attempt'))
  if worker and string.sub(worker, 1, #workers) == workers then
    owned[#owned + 1] = run_id
    owned[#owned + 1] = worker
    owned[#owned + 1] = attempt or ''
  end
end
return owned
