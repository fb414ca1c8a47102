-- Gives an expiry (the retention) to the records found in a page of the reapers' scan of the
-- namespace that no redcron script wrote as they are: a run record (run:<id>) without its job or
-- state, a workflow instance (wf:<id>) without its name, or either not a hash. Records with an
-- expiry already are left: they go anyway. Each one found is recorded in damaged-keys for
-- `status`, which forgets it a retention later. So a key written by something else, or left by
-- a damaged write, neither stays for ever nor goes unseen; one that holds runs' data is kept
-- long enough to be looked at.
--
-- KEYS[1] damaged-keys  zset    key suffix -> ms it was first found damaged
-- KEYS[2] hold          string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for the suffixes below
-- ARGV[2] retention, ms: the expiry given, and how long damaged-keys remembers a key
-- ARGV[3] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[4..] key suffixes to look at: run:<id> or wf:<id> (others are ignored)
--
-- Returns how many keys were found damaged by this call.
-- Cost: O(K) for the K suffixes given.
check_types('expire_damaged_keys', KEYS, {'zset', 'hold'})
local damaged_keys = KEYS[1]
local prefix, retention = ARGV[1], tonumber(ARGV[2])
if not retention then
  return redis.error_reply('ERR expire_damaged_keys: retention must be a number')
end
local now = now_ms(ARGV[3])

-- Every key is read before the first write: an error leaves nothing half done.
local found = {}
for i = 4, #ARGV do
  local suffix = ARGV[i]
  local key = prefix .. suffix
  local is_run = string.sub(suffix, 1, 4) == 'run:'
  local is_workflow = string.sub(suffix, 1, 3) == 'wf:'
  if (is_run or is_workflow) and redis.call('PTTL', key) == -1 then
    local damaged
    if redis.call('TYPE', key)['ok'] ~= 'hash' then
      damaged = true
    elseif is_run then
      local job, state = unpack(redis.call('HMGET', key, 'job', 'state'))
      damaged = not job or not state
    else
      damaged = not redis.call('HGET', key, 'name')
    end
    if damaged then
      found[#found + 1] = suffix
    end
  end
end

redis.call('ZREMRANGEBYSCORE', damaged_keys, '-inf', now - retention)
for _, suffix in ipairs(found) do
  redis.call('PEXPIRE', prefix .. suffix, retention)
  redis.call('ZADD', damaged_keys, 'NX', now, suffix)
end
if #found > 0 then
  redis.call('PEXPIRE', damaged_keys, retention)
end
return #found
