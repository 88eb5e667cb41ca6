-- Moves a task whose owner is gone to a live instance. ARGV: from, to, now, max
-- takeovers, counts (1: a lost owner, counted; 0: a graceful hand-over), keep round (1:
-- the outstanding round stays), statusMessage, then the failure's statusMessage and
-- error JSON for a task taken over too often, then the outbox plan. Only touches a live, unfinished task that
-- `from` still owns, so exactly one of several sweeping instances wins.
-- Returns {1, <the task's fields>} when moved, {2} when it failed instead, {0} otherwise.
local from, to, now = ARGV[1], ARGV[2], ARGV[3]
local max, counts, keep = tonumber(ARGV[4]), ARGV[5] == '1', ARGV[6] == '1'
if not live(now) or redis.call('HGET', task, 'owner') ~= from then
  return {0}
end
if is_terminal(redis.call('HGET', task, 'status')) then
  return {0}
end
if counts then
  local taken = redis.call('HINCRBY', task, 'takeovers', 1)
  if taken > max then
    finish(now, 'failed', {'msg', ARGV[8], 'error', ARGV[9]})
    emit('task.failed')
    shed()
    return {2}
  end
end
if not keep then
  -- The call runs again from the start: its round, questions and answers go.
  for _, name in ipairs(redis.call('HKEYS', task)) do
    local prefix = string.sub(name, 1, 3)
    if prefix == 'ir:' or prefix == 'an:' then
      redis.call('HDEL', task, name)
    end
  end
  redis.call('HDEL', task, 'ustate')
  redis.call('HSET', task, 'status', 'working', 'out', 0)
end
redis.call('HSET', task, 'owner', to, 'msg', ARGV[7])
touch(now)
emit('task.taken_over')
return {1, redis.call('HGETALL', task)}
