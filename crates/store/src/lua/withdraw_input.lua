-- Withdraws an outstanding input request the upstream gave up on. ARGV: now, key.
-- Returns 1 when the task went back to working, else 0.
local now, key = ARGV[1], ARGV[2]
if not live(now) or redis.call('HDEL', task, 'ir:' .. key) == 0 then
  return 0
end
local out = redis.call('HINCRBY', task, 'out', -1)
touch(now)
local status = redis.call('HGET', task, 'status')
if out <= 0 and status == 'input_required' then
  redis.call('HSET', task, 'status', 'working')
  return 1
end
return 0
