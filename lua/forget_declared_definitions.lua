-- Removes from the declared definitions the ones no replica's declarations referenced when the
-- leader read them, unless any replica published or withdrew declarations since: a replica that
-- publishes writes its definitions and bumps the version in one transaction, so a definition
-- it has just written is never removed under it.
--
-- KEYS[1] declarations   string  version, incremented by every publication or withdrawal
-- KEYS[2] declared-defs  hash    content hash -> canonical JSON of a declared definition
-- ARGV[1] the version the declarations were read at
-- ARGV[2..] content hashes none of them referenced
--
-- Returns the number of definitions removed, or -1 when the declarations changed since.
-- Cost: O(hashes).
check_types('forget_declared_definitions', KEYS, {'string', 'hash'})
local version, declared = KEYS[1], KEYS[2]
if (redis.call('GET', version) or '0') ~= ARGV[1] then
  return -1
end
if #ARGV < 2 then
  return 0
end
return redis.call('HDEL', declared, unpack(ARGV, 2))
