-- Deletes dead runs that died at or before a cutoff, hashes included.
--
-- KEYS[1] dead  zset  run id -> ms it died
-- KEYS[2] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for run:<id>
-- ARGV[2] cutoff, ms ('+inf' for every dead run)
-- ARGV[3] limit: most runs deleted by this call
--
-- Returns how many runs were deleted (call again while it returns the limit).
-- Cost: O(limit log N).
check_types('purge_dead', KEYS, {'zset', 'hold'})
local dead = KEYS[1]
local prefix, cutoff, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local run_ids = redis.call('ZRANGEBYSCORE', dead, '-inf', cutoff, 'LIMIT', 0, limit)
for _, run_id in ipairs(run_ids) do
  redis.call('DEL', key_run(prefix, run_id))
  redis.call('ZREM', dead, run_id)
end
return #run_ids
