-- KEYS = console history series (tag {console}); ARGV = interval_ms, horizon_ms, value per key.
-- Appends one sample per interval across all replicas: the first replica in an interval writes it,
-- the others find it and add nothing. -> 1 when sampled, 0 when this interval already had one.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval, horizon = tonumber(ARGV[1]), tonumber(ARGV[2])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] and now - tonumber(last[2]) < interval then return 0 end
for k = 1, #KEYS do
  redis.call('ZADD', KEYS[k], now, now .. ':' .. ARGV[k + 2])
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', now - horizon)
  redis.call('PEXPIRE', KEYS[k], horizon)
end
return 1
