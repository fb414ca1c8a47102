-- Acknowledges a part an exporter has written (or found written under its name): its records
-- leave the group's pending list and `archive-parts`, the outbox is trimmed below the oldest
-- record not acknowledged yet, and each run whose last record (`archive_id`, written by
-- record_outcome) is in the part gets the expiry its end deferred: its retention counted from
-- when it ended. The part's day (UTC, by its first record id) is added to `archive-days`, the
-- days whose manifest is to be written once they are closed (Store::closed_archive_days).
--
-- KEYS[1] archive        stream  the outbox
-- KEYS[2] archive-parts  hash    first record id -> "<last record id> <records>"
-- KEYS[3] hold  string  set while the namespace is held (redcron hold): nothing is written
-- KEYS[4] archive-days   zset    days (since 1970-01-01, UTC) with a part acknowledged and no
--                                manifest written yet, each scored by itself
-- ARGV[1] key prefix "{ns}:" for run:<id>
-- ARGV[2] consumer group
-- ARGV[3] the part's first record id
-- ARGV[4] retention of the run hashes, ms
-- ARGV[5] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[6..] pairs, one per record of the part: record id, run id
--
-- Returns how many records this call acknowledged (0 when another exporter had).
-- Cost: O(records + records trimmed).
check_types('ack_archived', KEYS, {'stream', 'hash', 'hold', 'zset'})
local archive, parts, days = KEYS[1], KEYS[2], KEYS[4]
local prefix, group, first, retention = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if not retention or (#ARGV - 5) % 2 ~= 0 then
  return redis.error_reply('ERR ack_archived: retention must be a number, records come in pairs')
end
local now = now_ms(ARGV[5])
local info = archive_group(archive, group)
if not info then
  return 0
end

local ids, acked = {}, 0
for i = 6, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
end
for start = 1, #ids, 1000 do
  acked = acked + redis.call('XACK', archive, group, unpack(ids, start, math.min(start + 999, #ids)))
end
redis.call('HDEL', parts, first)
if acked > 0 then
  -- The part's day has a part: its manifest is written once the day is closed.
  local day = math.floor(tonumber(string.match(first, '^(%d+)-')) / 86400000)
  redis.call('ZADD', days, day, day)
  for i = 6, #ARGV, 2 do
    local run_key = key_run(prefix, ARGV[i + 1])
    local read = redis.pcall('HMGET', run_key, 'archive_id', 'finished_ms')
    if type(read) == 'table' and not read.err and read[1] == ARGV[i] then
      local ended = tonumber(read[2]) or now
      redis.call('PEXPIRE', run_key, math.max(ended + retention - now, 1))
    end
  end
end

-- Below the oldest record given and not acknowledged, or else the first never given, every
-- record is archived.
local pending = redis.call('XPENDING', archive, group)
local below = pending[1] > 0 and pending[2] or nil
if not below then
  local ms, seq = string.match(info['last-delivered-id'], '^(%d+)-(%d+)$')
  below = ms .. '-' .. (tonumber(seq) + 1)
end
redis.call('XTRIM', archive, 'MINID', below)
return acked
