-- Adds outstanding input requests under fresh keys (`input-<n>`, n only grows), all in
-- one step, so that no reader sees part of an MRTR round.
-- ARGV: now, then each request as JSON, then the outbox plan. Returns {previous status, key...}, or false if
-- the task ended or is gone.
local now = ARGV[1]
if not live(now) then
  return false
end
local status = redis.call('HGET', task, 'status')
if is_terminal(status) then
  return false
end
local reply = {status}
for i = 2, #ARGV - 1 do
  local n = redis.call('HINCRBY', task, 'next', 1) - 1
  local key = 'input-' .. n
  redis.call('HSET', task, 'ir:' .. key, ARGV[i])
  reply[#reply + 1] = key
end
redis.call('HSET', task, 'status', 'input_required')
redis.call('HINCRBY', task, 'out', #ARGV - 2)
touch(now)
if status ~= 'input_required' and #ARGV > 2 then
  emit('task.input_required')
end
return reply
