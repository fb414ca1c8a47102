-- Drops from the active set the entries found there that are no run (their id is not UTF-8, so
-- no run's record has job and state under it): they hold no lease a worker renews, and the
-- reaper, which takes expired leases oldest first a batch at a time, would find them first at
-- every tick and never reach the runs behind them.
--
-- KEYS[1] active  zset    run id -> lease deadline ms
-- KEYS[2] hold    string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for run:<id>
-- ARGV[2..] the entries to drop, as Redis holds them
--
-- Returns how many were dropped.
-- Cost: O(E log N) for the E entries given.
check_types('drop_damaged_leases', KEYS, {'zset', 'hold'})
local active, prefix = KEYS[1], ARGV[1]

-- Every entry is read before the first write.
local dropped = {}
for i = 2, #ARGV do
  local entry = ARGV[i]
  local job, state = unpack(redis.call('HMGET', key_run(prefix, entry), 'job', 'state'))
  if not (job and state) and redis.call('ZSCORE', active, entry) then
    dropped[#dropped + 1] = entry
  end
end
for _, entry in ipairs(dropped) do
  redis.call('ZREM', active, entry)
end
return #dropped
