-- Settles a claimed head of one subscription's outbox. KEYS: due, queues, events,
-- attempts, ages (zset, pending id -> at), dead (zset, id -> given up at). ARGV: what
-- ('ack', 'retry' or 'dead'), task, event id, now, next try, error. Acts only if the
-- event is its task's head (a late answer to an ended claim changes nothing). Returns 1
-- if it acted, else 0.
local due, queues, events, attempts, ages, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local what, t, id, now, next_try, err = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local queue = redis.call('HGET', queues, t)
if not queue then
  return 0
end
local head, rest = string.match(queue, '^(%S+)%s*(.*)$')
if head ~= id then
  return 0
end
local a = redis.call('HGET', attempts, id)
a = a and cjson.decode(a) or {attempts = 0}
if what == 'retry' then
  a.error = err
  a.next = tonumber(next_try)
  redis.call('HSET', attempts, id, cjson.encode(a))
  redis.call('ZADD', due, next_try, t)
  return 1
end
-- The head goes; the task's next event is due now.
if rest == '' then
  redis.call('HDEL', queues, t)
  redis.call('ZREM', due, t)
else
  redis.call('HSET', queues, t, rest)
  redis.call('ZADD', due, now, t)
end
redis.call('ZREM', ages, id)
if what == 'ack' then
  redis.call('HDEL', events, id)
  redis.call('HDEL', attempts, id)
else
  a.error = err
  a.next = nil
  a.claimer = nil
  a.dead_at = tonumber(now)
  redis.call('HSET', attempts, id, cjson.encode(a))
  redis.call('ZADD', dead, now, id)
end
return 1
