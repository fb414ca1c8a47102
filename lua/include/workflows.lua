-- Workflows (DESIGN.md, section 5, Workflows): loaded after common.lua and slots.lua into every
-- script, so that each script that ends a run (ack_runs, fail_run, skip_run's callers,
-- bury_undeclared_runs) or re-drives one records it in the run's workflow and starts the steps
-- it lets start, in the same atomic call: a crash can never leave an instance stuck between two
-- steps.
--
-- One hash per instance, wf:<id>:
--   name, state (running | succeeded | failed), created_ms, finished_ms, on_failure (stop |
--   continue), retention_ms (kept this long once finished), payload (the instance's JSON object,
--   if any), steps (the step names in order, comma-separated), and per step: job:<step>,
--   needs:<step> (comma-separated), status:<step> (pending | queued | succeeded | failed |
--   skipped), at:<step> (ms of its last change), output:<step> (what it passes on: its payload
--   with its JSON object output over it, if any), error:<step> (why it could not be enqueued).
-- A step's run is the ad-hoc run <instance id>/<step> of its job, with fields workflow and step
-- (a step run again by `workflow retry` gets <instance id>/<step>/<n>, in run:<step>).
-- workflows-running (zset id -> ms started) holds the instances running, for settle_workflows.

local function key_workflow(prefix, id) return prefix .. 'wf:' .. id end
local function key_workflows_running(prefix) return prefix .. 'workflows-running' end
local function key_defs(prefix) return prefix .. 'defs' end

-- The run id of a step of an instance, as `step_run_id` in src/store/workflows.rs builds it.
local function step_run_id(workflow_id, step) return workflow_id .. '/' .. step end

-- The run of a step now: its first is step_run_id; `workflow retry` gives it a new one
-- (<instance id>/<step>/<n>), kept in run:<step>, so that a run retried never shares its id
-- with the one before it, which may still run, and each keeps its own history.
local function current_step_run(wf_key, workflow_id, step)
  return redis.call('HGET', wf_key, 'run:' .. step) or step_run_id(workflow_id, step)
end

-- The names in a comma-separated list (step and job names hold no comma).
local function names_in(list)
  local names = {}
  for name in string.gmatch(list or '', '[^,]+') do
    names[#names + 1] = name
  end
  return names
end

-- Whether a bare token (outside strings) is one strict JSON allows: true, false, null or a
-- number as JSON writes one. Lua's cjson also takes nan, inf and hex, which JSON readers refuse.
local function json_token(token)
  if token == 'true' or token == 'false' or token == 'null' then
    return true
  end
  local int, rest = string.match(token, '^%-?(%d+)(.*)$')
  if not int or (#int > 1 and string.sub(int, 1, 1) == '0') then
    return false
  end
  local fraction = string.match(rest, '^%.(%d+)')
  if fraction then
    rest = string.sub(rest, #fraction + 2)
  end
  return rest == '' or string.find(rest, '^[eE][%+%-]?%d+$') ~= nil
end

-- The members of a JSON object's text as {key, value text} pairs, in order, or nil when the text
-- is not one strict JSON object. Values are kept as written: Lua's cjson would round large
-- numbers and turn empty arrays into objects if they were decoded and encoded again.
local function object_members(text)
  if type(text) ~= 'string' or not string.find(text, '^%s*{') then
    return nil
  end
  local ok, decoded = pcall(cjson.decode, text)
  if not ok or type(decoded) ~= 'table' then
    return nil
  end
  -- The text is JSON to cjson: only strings (and their escapes) and nesting need following to
  -- find the top-level commas and colons, and what cjson takes beyond strict JSON (bare words
  -- other than true, false and null; control characters) to be refused.
  local members, depth, in_string, escaped, token_start = {}, 0, false, false, nil
  local member_start, colon = string.find(text, '{', 1, true) + 1, nil
  local function close_member(at)
    if colon then
      local key = cjson.decode(string.sub(text, member_start, colon - 1))
      local value = string.match(string.sub(text, colon + 1, at - 1), '^%s*(.-)%s*$')
      members[#members + 1] = {key, value}
    end
  end
  for at = member_start, #text do
    local byte = string.byte(text, at)
    local bare = not in_string and (byte == 43 or byte == 45 or byte == 46 -- + - .
      or (byte >= 48 and byte <= 57) or (byte >= 65 and byte <= 90) or (byte >= 97 and byte <= 122))
    if bare then
      token_start = token_start or at
    elseif token_start then
      if not json_token(string.sub(text, token_start, at - 1)) then
        return nil
      end
      token_start = nil
    end
    if byte < 32 and (in_string or not (byte == 9 or byte == 10 or byte == 13)) then
      return nil
    elseif bare then
      -- Part of a number or a word, checked whole at its end.
    elseif in_string then
      if escaped then
        escaped = false
      elseif byte == 92 then -- backslash
        escaped = true
      elseif byte == 34 then -- quote
        in_string = false
      end
    elseif byte == 34 then
      in_string = true
    elseif byte == 123 or byte == 91 then -- { [
      depth = depth + 1
    elseif byte == 125 or byte == 93 then -- } ]
      if depth == 0 then
        close_member(at)
        break
      end
      depth = depth - 1
    elseif depth == 0 and byte == 58 and not colon then -- :
      colon = at
    elseif depth == 0 and byte == 44 then -- ,
      close_member(at)
      member_start, colon = at + 1, nil
    end
  end
  return members
end

-- One JSON object of the members of `objects` (texts, nil ones left out), a key given by several
-- taking the value of the last, at the place of the first; nil when there is none.
local function merge_objects(objects)
  local order, values, any = {}, {}, false
  for _, text in ipairs(objects) do
    local members = object_members(text)
    if members then
      any = true
      for _, member in ipairs(members) do
        if values[member[1]] == nil then
          order[#order + 1] = member[1]
        end
        values[member[1]] = member[2]
      end
    end
  end
  if not any then
    return nil
  end
  local parts = {}
  for index, key in ipairs(order) do
    parts[index] = cjson.encode(key) .. ':' .. values[key]
  end
  return '{' .. table.concat(parts, ',') .. '}'
end

-- What a step passes on: the last non-empty line of its kept output, when that is a JSON object.
local function output_object(output)
  local last
  for line in string.gmatch(output or '', '[^\n]+') do
    if string.find(line, '%S') then
      last = line
    end
  end
  if last and object_members(last) then
    return (string.match(last, '^%s*(.-)%s*$'))
  end
  return nil
end

-- Creates the run of one step: an ad-hoc run of its job, ready now. Returns false when no live
-- replica has published the job (it cannot be run).
local function enqueue_step(prefix, workflow_id, step, job, payload, now)
  local def = decode_definition(redis.call('HGET', key_defs(prefix), job))
  if not def then
    return false
  end
  local run_id = current_step_run(key_workflow(prefix, workflow_id), workflow_id, step)
  local run_key = key_run(prefix, run_id)
  local now_text = tostring(now)
  redis.call('HSET', run_key,
    'job', job, 'kind', 'adhoc', 'due_ms', now_text, 'created_ms', now_text,
    'attempt', '0', 'max_attempts', tostring(def.retries + 1), 'queue', def.queue,
    'priority', def.priority, 'backoff_ms', tostring(def.backoff),
    'max_backoff_ms', tostring(def.max_backoff), 'delivery', def.delivery,
    'overlap', def.overlap, 'state', 'ready', 'workflow', workflow_id, 'step', step)
  if payload then
    redis.call('HSET', run_key, 'payload', payload)
  end
  if def.max_concurrency then
    redis.call('HSET', run_key, 'max_concurrency', tostring(def.max_concurrency))
  end
  set_run_notices(run_key, def.notify)
  note_ready_queue(def.queue, prefix)
  redis.call('RPUSH', ready_list(prefix, 'adhoc', def.queue, def.priority), run_id)
  redis.call('ZADD', key_wake(prefix, def.queue), 0, 'ready')
  return true
end

-- Starts every step of a running instance whose needs are met, and ends the instance when
-- nothing is left to run: succeeded when every step succeeded, else failed. A step that failed
-- or was skipped stops the instance (no further step starts) unless its on_failure is continue,
-- which counts it as done for the steps that need it.
local function advance_workflow(prefix, workflow_id, now)
  local wf_key = key_workflow(prefix, workflow_id)
  local state, step_list, on_failure, payload, retention = unpack(redis.call('HMGET', wf_key,
    'state', 'steps', 'on_failure', 'payload', 'retention_ms'))
  if state ~= 'running' then
    return
  end
  local steps = names_in(step_list)
  local fields = {}
  for _, step in ipairs(steps) do
    fields[#fields + 1] = 'status:' .. step
    fields[#fields + 1] = 'needs:' .. step
    fields[#fields + 1] = 'job:' .. step
  end
  local values = redis.call('HMGET', wf_key, unpack(fields))
  local status, needs, jobs = {}, {}, {}
  local failed = false
  for index, step in ipairs(steps) do
    status[step] = values[index * 3 - 2]
    needs[step] = names_in(values[index * 3 - 1])
    jobs[step] = values[index * 3]
    failed = failed or status[step] == 'failed' or status[step] == 'skipped'
  end
  local continue = on_failure == 'continue'
  local function done(need)
    local need_status = status[need]
    return need_status == 'succeeded'
      or (continue and (need_status == 'failed' or need_status == 'skipped'))
  end
  local progressed = true
  while progressed and (continue or not failed) do
    progressed = false
    for _, step in ipairs(steps) do
      local ready = status[step] == 'pending' and (continue or not failed)
      for _, need in ipairs(needs[step]) do
        ready = ready and done(need)
      end
      if ready then
        local step_payload = payload
        if #needs[step] > 0 then
          local objects = {payload}
          for _, need in ipairs(needs[step]) do
            objects[#objects + 1] = redis.call('HGET', wf_key, 'output:' .. need)
          end
          step_payload = merge_objects(objects)
        end
        if step_payload == false then
          step_payload = nil
        end
        if enqueue_step(prefix, workflow_id, step, jobs[step], step_payload, now) then
          status[step] = 'queued'
        else
          status[step] = 'failed'
          failed = true
          redis.call('HSET', wf_key, 'error:' .. step,
            'job ' .. (jobs[step] or '?') .. ' is declared by no live replica')
        end
        redis.call('HSET', wf_key, 'status:' .. step, status[step], 'at:' .. step, now)
        progressed = true
      end
    end
  end
  for _, step in ipairs(steps) do
    if status[step] == 'queued' or (status[step] == 'pending' and (continue or not failed)) then
      return
    end
  end
  redis.call('HSET', wf_key, 'state', failed and 'failed' or 'succeeded', 'finished_ms', now)
  redis.call('ZREM', key_workflows_running(prefix), workflow_id)
  if tonumber(retention) then
    redis.call('PEXPIRE', wf_key, tonumber(retention))
  end
end

-- Records how a run that is a workflow step ended (succeeded, failed when dead, skipped), keeps
-- what it passes on for the steps that need it, and advances its instance. A run of no workflow, or
-- of an instance that is gone (expired), is left alone. `step_of`, from a caller that read the
-- run's `workflow` and `step` with its other fields (each false for a run of no workflow), saves
-- reading them again.
workflow_step_ended = function(prefix, run_key, outcome, output, now, step_of)
  local workflow_id, step = unpack(step_of or redis.call('HMGET', run_key, 'workflow', 'step'))
  if not workflow_id or not step then
    return
  end
  local wf_key = key_workflow(prefix, workflow_id)
  -- A run retried since (see current_step_run) speaks for its step no more.
  if redis.call('HGET', wf_key, 'status:' .. step) ~= 'queued'
      or key_run(prefix, current_step_run(wf_key, workflow_id, step)) ~= run_key then
    return
  end
  redis.call('HSET', wf_key, 'status:' .. step, outcome, 'at:' .. step, now)
  -- What it passes on is what it received with its own output over it, so that what a step
  -- adds flows on down the steps after it.
  local passed = outcome == 'succeeded'
    and merge_objects({redis.call('HGET', run_key, 'payload'), output_object(output)})
  if passed then
    redis.call('HSET', wf_key, 'output:' .. step, passed)
  end
  advance_workflow(prefix, workflow_id, now)
end

-- An instance that runs again (a step re-driven or retried): kept until it ends anew.
local function reopen_workflow(prefix, workflow_id)
  local wf_key = key_workflow(prefix, workflow_id)
  redis.call('HSET', wf_key, 'state', 'running')
  redis.call('HDEL', wf_key, 'finished_ms')
  redis.call('PERSIST', wf_key)
  redis.call('ZADD', key_workflows_running(prefix), 'NX',
    redis.call('HGET', wf_key, 'created_ms') or 0, workflow_id)
end

-- A dead step re-driven (`redcron dead retry`): its instance runs again from it.
local function workflow_step_redriven(prefix, run_key, now)
  local workflow_id, step = unpack(redis.call('HMGET', run_key, 'workflow', 'step'))
  if not workflow_id or not step then
    return
  end
  local wf_key = key_workflow(prefix, workflow_id)
  if redis.call('HEXISTS', wf_key, 'status:' .. step) == 0
      or key_run(prefix, current_step_run(wf_key, workflow_id, step)) ~= run_key then
    return
  end
  redis.call('HSET', wf_key, 'status:' .. step, 'queued', 'at:' .. step, now)
  reopen_workflow(prefix, workflow_id)
end
