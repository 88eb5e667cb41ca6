-- Records the runner's outcome. ARGV: now, terminal status, then field/value pairs
-- (msg, result, error), then the outbox plan. Returns 1 if the task moved; 0 if it had already ended (a late
-- result after a cancel is dropped) or is gone.
local now, status = ARGV[1], ARGV[2]
if not live(now) then
  return 0
end
local moved = finish(now, status, {unpack(ARGV, 3, #ARGV - 1)})
if moved == 1 then
  emit('task.' .. status)
  shed()
end
return moved
