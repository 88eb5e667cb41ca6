-- Records the runner's outcome. ARGV: now, terminal status, then field/value pairs
-- (msg, result, error), then the outbox plan. Returns 1 if the task moved; 0 if it had already ended (a late
-- result after a cancel is dropped) or is gone.
local now, status = ARGV[1], ARGV[2]
local fields = {unpack(ARGV, 3, #ARGV - 1)}
if ARGV[#ARGV] ~= '' then
  if not live(now) then
    return 0
  end
  local moved = finish(now, status, fields)
  if moved == 1 then
    emit('task.' .. status)
    shed()
  end
  return moved
end

-- No subscription hears of it: the same end as `finish` then `shed`, in four calls at most
-- rather than twelve. Each call from a script costs Redis about as much again as the
-- command itself (docs/benchmarks.md, run 34), and this runs once for every task.
local created, ttl, current, updated, kept, issued = unpack(redis.call('HMGET', task,
  'created', 'ttl', 'status', 'updated', 'request_kept', 'next'))
if not created or tonumber(now) >= tonumber(created) + tonumber(ttl) then
  return 0
end
if is_terminal(current) then
  return 0
end
local gone = {'resume', 'ustate', 'request_kept'}
if status == 'completed' then
  gone[#gone + 1] = 'msg'
end
-- Input keys come from the `next` counter: at 0 none was ever given, so there are no
-- requests or answers to look for (most tasks never ask for input).
if issued ~= '0' then
  for _, name in ipairs(redis.call('HKEYS', task)) do
    local prefix = string.sub(name, 1, 3)
    if prefix == 'ir:' or prefix == 'an:' then
      gone[#gone + 1] = name
    end
  end
end
redis.call('HDEL', task, unpack(gone))
fields[#fields + 1] = 'status'
fields[#fields + 1] = status
fields[#fields + 1] = 'out'
fields[#fields + 1] = 0
if not updated or tonumber(now) > tonumber(updated) then
  fields[#fields + 1] = 'updated'
  fields[#fields + 1] = now
end
if kept then
  fields[#fields + 1] = 'request'
  fields[#fields + 1] = kept
end
redis.call('HSET', task, unpack(fields))
return 1
