-- Gives the leader lease up, only for the holder of this exact token.
--
-- KEYS[1] leader  string  "<replica id>:<epoch>" of the holder
-- ARGV[1] token this replica acquired
--
-- Returns 1 when released, 0 when it was not held by this token.
-- Cost: O(1).
check_types('release_leader', KEYS, {'string'})
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
