-- Cancels a task for its client. ARGV: principal, now, statusMessage, the outbox plan.
-- Returns {0} (no such task for this principal), {1, owner} (cancelled now) or {2}
-- (had already ended; nothing changed).
local principal, now, message = ARGV[1], ARGV[2], ARGV[3]
if not live(now) or redis.call('HGET', task, 'principal') ~= principal then
  return {0}
end
local owner = redis.call('HGET', task, 'owner')
if finish(now, 'cancelled', {'msg', message}) == 1 then
  emit('task.cancelled')
  shed()
  return {1, owner}
end
return {2}
