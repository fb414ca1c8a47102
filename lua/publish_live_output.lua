-- Publishes a running run's output so far, for `redcron runs show` while the run runs: its
-- tail as the worker keeps it, when Redis wrote it, and the attempt it is of (a retry's
-- output replaces its earlier attempt's). The key expires unless written again: what a
-- replica killed mid-run published is gone a few leases later; once the run ends, its record's
-- `output` is what is read, and this key is left to expire.
--
-- KEYS[1] live-output:<id>  hash    output, written_ms, attempt
-- KEYS[2] hold              string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] the output so far, at most 4 KiB (the worker bounds it)
-- ARGV[2] the attempt it is of, from 1
-- ARGV[3] expiry, ms from now
-- ARGV[4] now override, ms, or '' for Redis's clock (tests only)
--
-- Returns when it was written, ms on Redis's clock.
-- Cost: O(1).
check_types('publish_live_output', KEYS, {'hash', 'hold'})
local live = KEYS[1]
local output, attempt, expiry = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms(ARGV[4])
if not tonumber(attempt) or not expiry or expiry <= 0 then
  return redis.error_reply('ERR publish_live_output: attempt and expiry must be positive numbers')
end

redis.call('HSET', live, 'output', output, 'written_ms', now, 'attempt', attempt)
redis.call('PEXPIRE', live, expiry)
return now
