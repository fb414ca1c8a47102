-- Takes a run out of the dead letters and makes it due now with its attempts reset: one
-- script, so a crash can neither lose it nor leave it both dead and due. A dead workflow step
-- re-driven runs its instance again from that step. A run of a paused job stays dead: it would
-- only be skipped, and so leave the dead letters without having run; so does a run of a job with
-- no published definition (no live replica has declared it for the undeclared grace), which
-- would wait out that grace again and die as undeclared.
--
-- KEYS[1] dead           zset    run id -> ms it died
-- KEYS[2] due            zset    run id -> due ms, of cron fires (an ad-hoc run goes to due-runs,
--                                built from the prefix)
-- KEYS[3] events         stream  run state changes
-- KEYS[4] wake-promoter  channel told when a run becomes due
-- KEYS[5] hold  string  set while the namespace is held (redcron hold): nothing is written
-- ARGV[1] key prefix "{ns}:" for run:<id>, due-runs
-- ARGV[2] run id
-- ARGV[3] events stream MAXLEN (approximate), ' archive' after it when the namespace archives
-- ARGV[4] now override, ms, or '' for Redis's clock (tests only)
-- ARGV[5] who re-drives it (a console's token or user), recorded with the event, or '' when
--         not told
--
-- Returns 1 when re-driven, 0 when the run is not in the dead letters, {'paused', job} when its
-- job is paused, or {'unknown', job} when its job has no published definition.
-- Cost: O(log N).
check_types('redrive_run', KEYS, {'zset', 'zset', 'stream', 'channel', 'hold'})
local dead, due, events, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local prefix, run_id, actor = ARGV[1], ARGV[2], ARGV[5] or ''
local history = history_of(prefix, ARGV[3])

local now = now_ms(ARGV[4])
local run_key = key_run(prefix, run_id)

if redis.call('ZSCORE', dead, run_id) == false or redis.call('EXISTS', run_key) == 0 then
  return 0
end
local job, kind = unpack(checked_read('redrive_run', run_key, 'hash', 'HMGET', 'job', 'kind'))
check_type('redrive_run', key_paused(prefix), 'set')
check_type('redrive_run', key_defs(prefix), 'hash')
if job and redis.call('SISMEMBER', key_paused(prefix), job) == 1 then
  return {'paused', job}
end
if job and redis.call('HEXISTS', key_defs(prefix), job) == 0 then
  return {'unknown', job}
end
redis.call('ZREM', dead, run_id)
redis.call('HDEL', run_key, 'lost', 'error', 'reason', 'exit_code', 'output', 'finished_ms')
-- Marked, so that a re-driven cron fire is never skipped as an overlap (see claim_runs.lua).
redis.call('HSET', run_key, 'attempt', 0, 'state', 'scheduled', 'due_ms', now, 'redriven_ms', now)
redis.call('PERSIST', run_key)
-- Ad-hoc runs wait apart from the fires: re-driving thousands at once holds back no fire.
redis.call('ZADD', kind == 'cron' and due or key_due_runs(prefix), now, run_id)
workflow_step_redriven(prefix, run_key, now)
if actor == '' then
  record_event(events, history, run_id, 'scheduled', 'job', job or '', 'reason', 'redrive')
else
  record_event(events, history, run_id, 'scheduled', 'job', job or '', 'reason', 'redrive',
    'actor', actor)
end
redis.call('PUBLISH', wake, now)
return 1
