-- Sets statusMessage of a running task. ARGV: now, message. Returns 1 if set.
local now, message = ARGV[1], ARGV[2]
if not live(now) or is_terminal(redis.call('HGET', task, 'status')) then
  return 0
end
redis.call('HSET', task, 'msg', message)
touch(now)
return 1
