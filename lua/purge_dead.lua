-- Deletes dead runs that died at or before a cutoff, hashes included.
--
-- KEYS[1] dead    zset    run id -> ms it died
-- KEYS[2] hold    string  set while the namespace is held (redcron hold): nothing is written
-- KEYS[3] events  stream  where the purge is recorded (action `purge`), with who asked
-- ARGV[1] key prefix "{ns}:" for run:<id>
-- ARGV[2] cutoff, ms ('+inf' for every dead run)
-- ARGV[3] limit: most runs deleted by this call
-- ARGV[4] events stream MAXLEN (approximate)
-- ARGV[5] who asked (a console's token or user, `cli`), or '' when not told
--
-- Returns how many runs were deleted (call again while it returns the limit).
-- Cost: O(limit log N).
check_types('purge_dead', KEYS, {'zset', 'hold', 'stream'})
local dead, events = KEYS[1], KEYS[3]
local prefix, cutoff, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local maxlen, actor = tonumber(ARGV[4]), ARGV[5] or ''
local run_ids = redis.call('ZRANGEBYSCORE', dead, '-inf', cutoff, 'LIMIT', 0, limit)
for _, run_id in ipairs(run_ids) do
  redis.call('DEL', key_run(prefix, run_id))
  redis.call('ZREM', dead, run_id)
end
-- One entry a call, naming the first run deleted and how many: a purge of every dead run is
-- a call per thousand.
if #run_ids > 0 then
  record_action(events, maxlen, nil, 'purge', actor, run_ids[1], #run_ids)
end
return #run_ids
