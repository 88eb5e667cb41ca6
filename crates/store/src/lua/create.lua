-- Creates a task. ARGV[1]: key TTL in ms (the task's ttlMs plus a grace period);
-- ARGV[2..n-1]: field/value pairs; ARGV[n]: the outbox plan. Returns 1, or 0 if the id
-- is taken.
if redis.call('EXISTS', task) == 1 then
  return 0
end
redis.call('HSET', task, unpack(ARGV, 2, #ARGV - 1))
redis.call('PEXPIRE', task, ARGV[1])
emit('task.created')
return 1
