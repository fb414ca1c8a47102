-- Gives an exporter the next part of the archive to write. First a part that an exporter was
-- given and did not acknowledge within `idle` (it died, or the archive refused it): the same
-- records as recorded when it was first given, so that it is written again under the same name
-- with the same bytes. Else, once a part is due to close, the next records no exporter was given
-- (at most `max`, and past the first no more than `max_bytes` of fields and values, all of one
-- hour of their ids), recorded in `archive-parts` before the call
-- returns, so before any of them is written. Makes the consumer group on first use.
--
-- KEYS[1] archive        stream  the outbox: one record per outcome (record_outcome in common.lua)
-- KEYS[2] archive-parts  hash    first record id -> "<last record id> <records>" of each part
--                                given to an exporter and not acknowledged yet
-- ARGV[1] consumer group
-- ARGV[2] consumer: the exporting replica's id
-- ARGV[3] most records in a part
-- ARGV[4] age, ms: a part closes once its first record is that old, its hour has passed, or it
--         is full
-- ARGV[5] idle, ms: a part given that long ago and not acknowledged is given again
-- ARGV[6] '1' to close a part whatever its age (a stopping replica writes what there is)
-- ARGV[7] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[8] most bytes of a part's records (their fields' names and values): a part holds at
--         least one record, however large
--
-- Returns {'PART', first id, last id, records} with records a list of {id, {field, value, ...}},
-- {'WAIT', ms until the next part closes}, or {'NONE'} when no record waits.
-- Cost: O(max) when a part is given, O(log N) otherwise.
check_types('take_archive_part', KEYS, {'stream', 'hash'})
local archive, parts = KEYS[1], KEYS[2]
local group, consumer = ARGV[1], ARGV[2]
local max, age, idle = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local max_bytes = tonumber(ARGV[8])
if not max or max < 1 or not age or not idle or not max_bytes then
  return redis.error_reply('ERR take_archive_part: max, age, idle and max_bytes must be numbers, max at least 1')
end
local force = ARGV[6] == '1'
local now = now_ms(ARGV[7])
local HOUR_MS = 3600000

-- A stream id's parts, compared as numbers: ids are not ordered as strings.
local function id_parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function id_after(a, b)
  local a_ms, a_seq = id_parts(a)
  local b_ms, b_seq = id_parts(b)
  return a_ms > b_ms or (a_ms == b_ms and a_seq > b_seq)
end
-- The records of `records` up to the end of the first one's hour: a part is of one hour.
local function one_hour(records)
  local hour = math.floor(id_parts(records[1][1]) / HOUR_MS)
  local kept = {}
  for _, record in ipairs(records) do
    if math.floor(id_parts(record[1]) / HOUR_MS) ~= hour then
      break
    end
    kept[#kept + 1] = record
  end
  return kept
end

local info = archive_group(archive, group)
if not info then
  redis.call('XGROUP', 'CREATE', archive, group, '0', 'MKSTREAM')
  info = {['last-delivered-id'] = '0-0'}
end

-- A part given before and left: parts are acknowledged whole, so the oldest record left idle is
-- the first of its part.
local left = redis.call('XPENDING', archive, group, 'IDLE', idle, '-', '+', 1)[1]
if left then
  local first = left[1]
  local last, count = string.match(redis.call('HGET', parts, first) or '', '^(%S+) (%d+)$')
  local claimed = redis.call('XAUTOCLAIM', archive, group, consumer, idle, first, 'COUNT',
    count or max)[2]
  if #claimed > 0 then
    local records = {}
    if last then
      for _, record in ipairs(claimed) do
        if not id_after(record[1], last) then
          records[#records + 1] = record
        end
      end
    else
      -- Given and never recorded as a part: only damage or a rewound Redis leaves that, and
      -- nothing of it was written under a name yet, so it is recorded as a part now.
      records = one_hour(claimed)
      last = records[#records][1]
      redis.call('HSET', parts, records[1][1], last .. ' ' .. #records)
    end
    if #records > 0 then
      return {'PART', records[1][1], last, records}
    end
  end
end

local delivered = info['last-delivered-id']
local next_record = redis.call('XRANGE', archive, '(' .. delivered, '+', 'COUNT', 1)[1]
if not next_record then
  return {'NONE'}
end
local first_ms = id_parts(next_record[1])
local closes_ms = math.min(first_ms + age, (math.floor(first_ms / HOUR_MS) + 1) * HOUR_MS)
local waiting = tonumber(info.lag)
if not force and now < closes_ms and waiting and waiting < max then
  return {'WAIT', closes_ms - now}
end
local records = one_hour(redis.call('XRANGE', archive, '(' .. delivered, '+', 'COUNT', max))
-- Bounded in bytes too, so that a few large payloads make no part (nor an exporter's memory)
-- larger than the bound.
local bytes = 0
for i, record in ipairs(records) do
  for _, value in ipairs(record[2]) do
    bytes = bytes + #value
  end
  if i > 1 and bytes > max_bytes then
    for j = #records, i, -1 do
      records[j] = nil
    end
    break
  end
end
-- Nothing ran since the range was read: the group hands out exactly those records.
records = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', #records, 'STREAMS', archive,
  '>')[1][2]
local last = records[#records][1]
redis.call('HSET', parts, records[1][1], last .. ' ' .. #records)
return {'PART', records[1][1], last, records}
