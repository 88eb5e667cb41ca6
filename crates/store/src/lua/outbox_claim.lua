-- Claims due heads of one subscription's outbox. KEYS: due (zset, task -> next try),
-- queues (hash, task -> event ids oldest first, space-separated), events (hash, id ->
-- event), attempts (hash, id -> attempts JSON). ARGV: now, claimed until, limit,
-- claimer. Each head claimed stays invisible until its claim ends; a claimer that died
-- leaves a claim that ends, and another claims it. Returns {event, attempts, ...}.
local due, queues, events, attempts = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now, claimed_until, limit, claimer = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local out = {}
for _, t in ipairs(redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, limit)) do
  local queue = redis.call('HGET', queues, t)
  local head = queue and string.match(queue, '^(%S+)')
  if not head then
    redis.call('ZREM', due, t)
  else
    local a = redis.call('HGET', attempts, head)
    a = a and cjson.decode(a) or {attempts = 0}
    a.attempts = a.attempts + 1
    a.next = tonumber(claimed_until)
    a.claimer = claimer
    redis.call('HSET', attempts, head, cjson.encode(a))
    redis.call('ZADD', due, claimed_until, t)
    local event = redis.call('HGET', events, head)
    if event then
      out[#out + 1] = event
      out[#out + 1] = tostring(a.attempts)
    end
  end
end
return out
