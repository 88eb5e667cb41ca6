-- Puts dead letters back at the end of their task's queue, attempts reset. KEYS: due,
-- queues, events, attempts, ages, dead. ARGV: now, event id ('' for every dead letter).
-- Returns how many went back.
local due, queues, events, attempts, ages, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local now, only = ARGV[1], ARGV[2]
local ids
if only == '' then
  ids = redis.call('ZRANGE', dead, 0, -1)
elseif redis.call('ZSCORE', dead, only) then
  ids = {only}
else
  ids = {}
end
local moved = 0
for _, id in ipairs(ids) do
  redis.call('ZREM', dead, id)
  local event = redis.call('HGET', events, id)
  if event then
    local parsed = cjson.decode(event)
    local t = parsed.task
    redis.call('HSET', attempts, id, cjson.encode({attempts = 0}))
    redis.call('ZADD', ages, parsed.at, id)
    local queue = redis.call('HGET', queues, t)
    if queue then
      redis.call('HSET', queues, t, queue .. ' ' .. id)
    else
      redis.call('HSET', queues, t, id)
      redis.call('ZADD', due, now, t)
    end
    moved = moved + 1
  end
end
return moved
