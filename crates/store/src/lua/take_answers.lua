-- Takes the accepted answers not yet forwarded; each is returned once.
-- ARGV: now. Returns a flat list key, answer-JSON, ...
if not live(ARGV[1]) then
  return {}
end
local fields = redis.call('HGETALL', task)
local taken = {}
for i = 1, #fields, 2 do
  local name = fields[i]
  if string.sub(name, 1, 3) == 'an:' then
    redis.call('HDEL', task, name)
    taken[#taken + 1] = string.sub(name, 4)
    taken[#taken + 1] = fields[i + 1]
  end
end
return taken
