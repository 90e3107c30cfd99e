-- An interactive request that waits for a slot while batch lines hold slots (queue.py, with
-- their take time) is preempted: its batch slot is dropped here and '!<lease id>' is published on
-- the model's channel, for the runner that runs it to abort the line and put it back (runner.py).
-- KEYS = the model's keys, then its batch ZSET; ARGV[8] = the waiting request's id
-- -> the preempted line's lease id | '' (the request no longer waits, a slot is free, or no batch
--    line holds a slot)
--! include _prelude
local st = redis.call('HGET', W, ARGV[8])
if not st or string.sub(st, 1, 2) ~= 'q|' then return '' end
if pick() then return '' end
local B = KEYS[#KEYS]
redis.call('ZREMRANGEBYSCORE', B, '-inf', now)
local best = nil
for _, m in ipairs(redis.call('ZRANGE', B, 0, -1)) do
  local s = redis.call('HGET', W, m)
  if s and string.sub(s, 1, 2) == 'g|' and (best == nil or m > best) then best = m end
end
if not best then return '' end
redis.call('ZREM', B, best)
redis.call('PUBLISH', channel, '!' .. best)
return best
