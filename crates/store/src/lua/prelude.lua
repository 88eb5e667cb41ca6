-- Shared by every task script (prepended at build time). KEYS[1] is the task's hash
-- `mtg:<ns>:{<taskId>}`, named by the gateway; scripts build no key name. A script of a
-- transition that makes a task event also gets, after KEYS[1], four outbox keys per
-- subscription that wants it (see `emit`), and the plan as its last ARGV; without
-- subscriptions it touches no other key, and runs unchanged on Redis Cluster.
-- Times are unix milliseconds passed by the caller; they are written back as the
-- caller's strings (never as Lua numbers, which Redis may format as floats).

local task = KEYS[1]

-- A task is live while its hash exists and its TTL has not passed. The key outlives the
-- TTL by a short grace period; in that window the task already reads as gone.
local function live(now)
  local created, ttl = unpack(redis.call('HMGET', task, 'created', 'ttl'))
  if not created then
    return false
  end
  return tonumber(now) < tonumber(created) + tonumber(ttl)
end

local function is_terminal(status)
  return status == 'completed' or status == 'failed' or status == 'cancelled'
end

-- lastUpdatedAt never goes back, even if the callers' clocks disagree a little.
local function touch(now)
  local updated = redis.call('HGET', task, 'updated')
  if not updated or tonumber(now) > tonumber(updated) then
    redis.call('HSET', task, 'updated', now)
  end
end

-- Moves a live, non-terminal task to a terminal status; outstanding input requests and
-- unforwarded answers go with it. `fields` are extra field/value pairs (message, result,
-- error). Returns 1 when it moved, 0 when the task was already terminal.
local function finish(now, status, fields)
  if is_terminal(redis.call('HGET', task, 'status')) then
    return 0
  end
  local names = redis.call('HKEYS', task)
  for _, name in ipairs(names) do
    local prefix = string.sub(name, 1, 3)
    if prefix == 'ir:' or prefix == 'an:' then
      redis.call('HDEL', task, name)
    end
  end
  redis.call('HSET', task, 'status', status, 'out', 0)
  -- The last progress text says nothing true of a completed task.
  if status == 'completed' then
    redis.call('HDEL', task, 'msg')
  end
  if #fields > 0 then
    redis.call('HSET', task, unpack(fields))
  end
  touch(now)
  return 1
end

-- What an ended task no longer needs, dropped after its event is written (the event may
-- carry the arguments): the data to resume the call elsewhere, the upstream's round
-- state, and all of the call but what `request_kept` holds (the tool's name and the
-- progress token, made by the gateway at create), unless the task keeps its arguments
-- (no `request_kept`). `TaskRecord::shed_after_end` is the same for the memory store.
local function shed()
  redis.call('HDEL', task, 'resume', 'ustate')
  local kept = redis.call('HGET', task, 'request_kept')
  if kept then
    redis.call('HSET', task, 'request', kept)
    redis.call('HDEL', task, 'request_kept')
  end
end

-- The task's fields as an outbox event (`outbox.rs`, `StoredEvent`): text only, raw JSON
-- kept as strings; the request and result only for a subscription that includes them.
local function snapshot(kind, id, at, task_id, with_result)
  local flat = redis.call('HGETALL', task)
  local f, ir = {}, {}
  for j = 1, #flat, 2 do
    local name = flat[j]
    if string.sub(name, 1, 3) == 'ir:' then
      ir[#ir + 1] = {tonumber(string.sub(name, 10)) or 0, flat[j + 1]}
    else
      f[name] = flat[j + 1]
    end
  end
  table.sort(ir, function(a, b) return a[1] < b[1] end)
  local ev = {id = id, type = kind, at = at, task = task_id, principal = f.principal,
    status = f.status, created = f.created, updated = f.updated, msg = f.msg, error = f.error}
  if #ir > 0 then
    local texts = {}
    for j, pair in ipairs(ir) do texts[j] = pair[2] end
    ev.ir = texts
  end
  local ok, request = pcall(cjson.decode, f.request or '')
  if ok and type(request) == 'table' and type(request.name) == 'string' then
    ev.tool = request.name
  end
  if with_result then
    ev.result = f.result
    ev.request = f.request
  end
  return cjson.encode(ev)
end

-- Appends event `kind` to the outbox of each subscription of the plan (the last ARGV:
-- {"t": taskId, "n": now, "s": [{"i": event id, "w": [wanted types], "r": 0|1}]})
-- that wants it. Subscription k's keys are KEYS[4k-2..4k+1]: its due heads (zset, task
-- -> next try), its queues (hash, task -> event ids oldest first, space-separated),
-- its events (hash, id -> event) and their ages (zset, id -> at).
local function emit(kind)
  local plan = ARGV[#ARGV]
  if plan == nil or plan == '' then
    return
  end
  plan = cjson.decode(plan)
  for k, sub in ipairs(plan.s) do
    local wanted = false
    for _, w in ipairs(sub.w) do
      if w == kind then wanted = true end
    end
    if wanted then
      local due, queues, events, ages = KEYS[4 * k - 2], KEYS[4 * k - 1], KEYS[4 * k], KEYS[4 * k + 1]
      redis.call('HSET', events, sub.i, snapshot(kind, sub.i, plan.n, plan.t, sub.r == 1))
      redis.call('ZADD', ages, plan.n, sub.i)
      local queue = redis.call('HGET', queues, plan.t)
      if queue then
        redis.call('HSET', queues, plan.t, queue .. ' ' .. sub.i)
      else
        redis.call('HSET', queues, plan.t, sub.i)
        redis.call('ZADD', due, plan.n, plan.t)
      end
    end
  end
end
