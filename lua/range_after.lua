#!lua flags=no-writes,allow-oom
-- Reads a page of a sorted set of runs after a position that a page before it ended at: the
-- entries that sort after (score, member) as Redis sorts them (by score, then by the member's
-- bytes), whether or not that member is still in the set. A listing that passes the last
-- entry of each page here lists every entry that stays in the set once, in order, however the
-- set changes in between, and a page costs the same wherever in the set it starts.
--
-- KEYS[1] runs  zset  run id -> ms (due time, or lease deadline)
-- ARGV[1] the score of the position, ms; '' for the start of the set
-- ARGV[2] the member of the position (bytes); ignored with ARGV[1] ''
-- ARGV[3] how many entries at most, at least 1
--
-- Returns {member, score, member, score, ...}, at most ARGV[3] entries.
-- Cost: O(log(N) * log(T) + limit) for N entries of which T share the position's score.
check_types('range_after', KEYS, {'zset'})
local set = KEYS[1]
local score, member, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not limit or limit < 1 then
  return redis.error_reply('range_after: limit ' .. ARGV[3] .. ' is no count of entries')
end

-- Whether `a` sorts after `b` byte by byte, as Redis orders members of one score: Lua's own
-- comparison follows the server's collation locale, which need not be bytewise.
local function after(a, b)
  local length = math.min(#a, #b)
  for i = 1, length do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return #a > #b
end

local start = 0
if score ~= '' then
  if not tonumber(score) then
    return redis.error_reply('range_after: score ' .. score .. ' is no number')
  end
  -- Those of a lower score come first; among those of the same score, the first whose member
  -- sorts after the position's is found by halving, one ZRANGE of one entry at a time.
  local lower = redis.call('ZCOUNT', set, '-inf', '(' .. score)
  local ties = redis.call('ZCOUNT', set, score, score)
  local low, high = lower, lower + ties
  while low < high do
    local middle = math.floor((low + high) / 2)
    local at = redis.call('ZRANGE', set, middle, middle)[1]
    if after(at, member) then
      high = middle
    else
      low = middle + 1
    end
  end
  start = low
end
return redis.call('ZRANGE', set, start, start + limit - 1, 'WITHSCORES')
