-- Fails a task of an owner that is gone (lease lapsed, or it shut down). ARGV: owner,
-- now, statusMessage, error JSON, the outbox plan. Only touches the task if that instance still owns it
-- and it has not ended. Returns 1 if it was failed.
local owner, now, message, err = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not live(now) or redis.call('HGET', task, 'owner') ~= owner then
  return 0
end
local failed = finish(now, 'failed', {'msg', message, 'error', err})
if failed == 1 then
  emit('task.failed')
  shed()
end
return failed
