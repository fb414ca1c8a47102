-- Pauses or resumes a job, and records who did it in the events stream in the same call, so
-- that the stream never shows a pause that did not happen nor misses one that did. A pause or
-- resume that changes nothing (the job was paused already, or was not) records nothing.
--
-- KEYS[1] paused  set     paused job names
-- KEYS[2] events  stream  run state changes, and operators' actions on jobs
-- ARGV[1] job name
-- ARGV[2] '1' to pause, '0' to resume
-- ARGV[3] events stream MAXLEN (approximate)
-- ARGV[4] who asked (a console's token or user, `cli`), recorded with the event, or '' when
--         not told
--
-- Returns 1 when the job's state changed, 0 when it was so already.
-- Cost: O(1).
check_types('set_paused', KEYS, {'set', 'stream'})
local paused, events = KEYS[1], KEYS[2]
local job, pause, maxlen, actor = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] or ''
if pause ~= '1' and pause ~= '0' then
  return redis.error_reply('ERR set_paused: ARGV[2] must be 1 or 0, not ' .. tostring(pause))
end

local changed
if pause == '1' then
  changed = redis.call('SADD', paused, job)
else
  changed = redis.call('SREM', paused, job)
end
if changed == 0 then
  return 0
end
record_action(events, maxlen, job, pause == '1' and 'pause' or 'resume', actor)
return 1
