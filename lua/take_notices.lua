-- Takes notices for one replica to send, each leased to it: first those of outcomes it
-- recorded itself (notices-of:<replica>), then any whose time has come: one whose recorder
-- died before sending it (NOTICE_HANDOFF_MS in common.lua), one whose sender's lease expired
-- (it died mid-send), or one due again after a target failed. A notice is taken by one replica
-- at a time; a taken notice leaves its recorder's list.
--
-- KEYS[1] notices            zset  notice id -> ms from which any replica may take it
-- KEYS[2] notices-of:<replica>  zset  notice id -> ms recorded, this replica's own
-- KEYS[3] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for notice:<id>, notices-of:<replica>
-- ARGV[2] replica id
-- ARGV[3] lease, ms
-- ARGV[4] most notices taken
-- ARGV[5] now override, ms, or '' for Redis's clock (tests only)
--
-- Returns one {id, {field, value, ...}} per notice taken, the fields of its hash (see add_notice
-- in common.lua) after taking it: `holder` and `tries` included.
-- Cost: O(limit log N).
check_types('take_notices', KEYS, {'zset', 'zset', 'hold'})
local notices, own = KEYS[1], KEYS[2]
local prefix, replica, lease, limit = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if not lease or not limit then
  return redis.error_reply('ERR take_notices: lease and limit must be numbers')
end
local now = now_ms(ARGV[5])

local taken, reply = {}, {}
local function take(id)
  if taken[id] then
    return
  end
  taken[id] = true
  local key = key_notice(prefix, id)
  local owner = redis.call('HGET', key, 'owner')
  if owner then
    redis.call('ZREM', key_notices_of(prefix, owner), id)
  end
  if redis.call('EXISTS', key) == 0 then
    -- An id whose hash is gone says nothing to anyone.
    redis.call('ZREM', notices, id)
    return
  end
  redis.call('ZADD', notices, now + lease, id)
  redis.call('HSET', key, 'holder', replica)
  redis.call('HINCRBY', key, 'tries', 1)
  reply[#reply + 1] = {id, redis.call('HGETALL', key)}
end

for _, id in ipairs(redis.call('ZRANGE', own, 0, limit - 1)) do
  if redis.call('ZSCORE', notices, id) then
    take(id)
  else
    redis.call('ZREM', own, id)
  end
end
if #reply < limit then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', notices, '-inf', now, 'LIMIT', 0, limit - #reply)) do
    take(id)
  end
end
return reply
