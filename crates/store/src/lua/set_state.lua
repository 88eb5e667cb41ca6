-- Replaces the runner's resumable upstream state. ARGV: now, '1' + state JSON to set,
-- or '0' to clear. Never creates the hash (it would have no TTL), and leaves an ended
-- task as it is (its state went with its end, `shed`).
local now, present, state = ARGV[1], ARGV[2], ARGV[3]
if not live(now) or is_terminal(redis.call('HGET', task, 'status')) then
  return 0
end
if present == '1' then
  redis.call('HSET', task, 'ustate', state)
else
  redis.call('HDEL', task, 'ustate')
end
return 1
