-- Accepts answers for outstanding keys only; each is moved to `an:<key>` for the owner
-- to take. Atomic, so an answer that reaches two instances at once is accepted once.
-- ARGV: principal, now, then key/answer-JSON pairs.
-- Returns {0} when there is no such task for this principal, else
-- {1, owner, went_back_to_working (0/1), accepted keys...}.
local principal, now = ARGV[1], ARGV[2]
if not live(now) then
  return {0}
end
local owner_of, owner, status = unpack(redis.call('HMGET', task, 'principal', 'owner', 'status'))
if owner_of ~= principal then
  return {0}
end
if is_terminal(status) then
  return {1, owner, 0}
end
local result = {1, owner, 0}
local accepted = 0
for i = 3, #ARGV, 2 do
  local key = ARGV[i]
  if redis.call('HDEL', task, 'ir:' .. key) == 1 then
    redis.call('HSET', task, 'an:' .. key, ARGV[i + 1])
    accepted = accepted + 1
    result[#result + 1] = key
  end
end
if accepted > 0 then
  local out = redis.call('HINCRBY', task, 'out', -accepted)
  if out <= 0 then
    redis.call('HSET', task, 'status', 'working')
    result[3] = 1
  end
  touch(now)
end
return result
