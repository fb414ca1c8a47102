-- Extends the leader lease, only for the holder of this exact token (replica and epoch).
--
-- KEYS[1] leader  string  "<replica id>:<epoch>" of the holder, with a PX lease
-- ARGV[1] token this replica acquired
-- ARGV[2] lease ttl, ms
--
-- Returns 1 when renewed, 0 when the lease is gone or held by another token (step down).
-- Cost: O(1).
check_types('renew_leader', KEYS, {'string'})
local leader = KEYS[1]
local token, ttl = ARGV[1], tonumber(ARGV[2])

if redis.call('GET', leader) ~= token then
  return 0
end
redis.call('PEXPIRE', leader, ttl)
return 1
