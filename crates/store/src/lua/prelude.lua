-- Shared by every task script (prepended at build time). KEYS[1] is the task's hash
-- `mtg:<ns>:{<taskId>}`, named by the gateway; scripts build no key name and touch no
-- other key, so they stay in the namespace and run unchanged on Redis Cluster.
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
