-- Takes the leader lease if nobody holds it, with a new epoch as fencing token.
--
-- KEYS[1] leader  string  "<replica id>:<epoch>" of the holder, with a PX lease
-- KEYS[2] epoch   int     incremented on every acquisition
-- ARGV[1] replica id
-- ARGV[2] lease ttl, ms
--
-- Returns {1, token} when acquired, {0, holder's token} when the lease is held.
-- Cost: O(1).
check_types('acquire_leader', KEYS, {'string', 'string'})
local leader, epoch_key = KEYS[1], KEYS[2]
local replica, ttl = ARGV[1], tonumber(ARGV[2])
if not ttl or ttl <= 0 then
  return redis.error_reply('ERR lease ttl must be a positive number of ms')
end

local holder = redis.call('GET', leader)
if holder then
  return {0, holder}
end
local token = replica .. ':' .. redis.call('INCR', epoch_key)
redis.call('SET', leader, token, 'PX', ttl)
return {1, token}
