-- What became of a notice its sender holds: its lease extended while it is being sent, one
-- target delivered or given up (it refused the notice), all of it due again later (a target
-- failed for now), or done (every target has it or was given up). Refused when the notice is
-- no longer this sender's: another replica took it over after the lease expired, or it is
-- done.
--
-- KEYS[1] notices  zset  notice id -> ms from which any replica may take it
-- KEYS[2] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for notice:<id>
-- ARGV[2] notice id
-- ARGV[3] replica id of the sender
-- ARGV[4] what: extend | delivered | given_up | retry | finish
-- ARGV[5] extend: lease ms; delivered, given_up: the target's index (0-based); retry: ms from
--         now when it is due again; finish: ''
-- ARGV[6] now override, ms, or '' for Redis's clock (tests only)
--
-- Returns 1 when done, 0 when the notice is not this sender's.
-- Cost: O(log N).
check_types('settle_notice', KEYS, {'zset', 'hold'})
local notices = KEYS[1]
local prefix, id, replica, what, value = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local now = now_ms(ARGV[6])
local key = key_notice(prefix, id)

if not redis.call('ZSCORE', notices, id)
    or checked_read('settle_notice', key, 'hash', 'HGET', 'holder') ~= replica then
  return 0
end
if what == 'extend' then
  redis.call('ZADD', notices, 'XX', now + tonumber(value), id)
elseif what == 'delivered' then
  redis.call('HSET', key, 'done:' .. value, now)
elseif what == 'given_up' then
  redis.call('HSET', key, 'given_up:' .. value, now)
elseif what == 'retry' then
  redis.call('ZADD', notices, 'XX', now + tonumber(value), id)
  redis.call('HDEL', key, 'holder')
elseif what == 'finish' then
  redis.call('ZREM', notices, id)
  redis.call('DEL', key)
else
  return redis.error_reply('ERR settle_notice: unknown action ' .. what)
end
return 1
