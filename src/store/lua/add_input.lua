-- Adds an outstanding input request under a fresh key (`input-<n>`, n only grows).
-- ARGV: now, the request as JSON. Returns {key, previous status}, or false if the task
-- ended or is gone.
local now, request = ARGV[1], ARGV[2]
if not live(now) then
  return false
end
local status = redis.call('HGET', task, 'status')
if is_terminal(status) then
  return false
end
local n = redis.call('HINCRBY', task, 'next', 1) - 1
local key = 'input-' .. n
redis.call('HSET', task, 'ir:' .. key, request, 'status', 'input_required')
redis.call('HINCRBY', task, 'out', 1)
touch(now)
return {key, status}
