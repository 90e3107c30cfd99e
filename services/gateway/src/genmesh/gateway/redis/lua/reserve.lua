-- Reserve a stored thing in a quota ledger, checking the quota first: ZSET member -> expiry ms and
-- HASH member -> bytes, with the sum in its '#' field. Members past their expiry (the file expired
-- with its TTL) are dropped first, at most 100 a call, so they stop counting without a sweeper.
-- KEYS = [expiry zset, bytes hash]; ARGV = member, bytes, expiry ms (absolute), max count (0: none),
-- max bytes (0: none), ledger ttl ms -> {0, count, bytes} reserved (the totals before it) |
-- {1, count, bytes} over the count quota | {2, count, bytes} over the bytes quota. A member reserved
-- already keeps its place; a smaller size shrinks its bytes (an upload reserved at its body's length
-- is counted at its file's size once stored).
--! include _now
local Z, H = KEYS[1], KEYS[2]
for _, m in ipairs(redis.call('ZRANGEBYSCORE', Z, '-inf', now, 'LIMIT', 0, 100)) do
  redis.call('HINCRBY', H, '#', -tonumber(redis.call('HGET', H, m) or '0'))
  redis.call('HDEL', H, m)
  redis.call('ZREM', Z, m)
end
local count = redis.call('ZCARD', Z)
local total = tonumber(redis.call('HGET', H, '#') or '0')
local size, max_count, max_bytes = tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
if redis.call('ZSCORE', Z, ARGV[1]) then  -- reserved already
  local held = tonumber(redis.call('HGET', H, ARGV[1]) or '0')
  if size < held then
    redis.call('HSET', H, ARGV[1], size)
    redis.call('HINCRBY', H, '#', size - held)
  end
  return {0, count, total}
end
if max_count > 0 and count + 1 > max_count then return {1, count, total} end
if max_bytes > 0 and total + size > max_bytes then return {2, count, total} end
redis.call('ZADD', Z, ARGV[3], ARGV[1])
redis.call('HSET', H, ARGV[1], size)
redis.call('HINCRBY', H, '#', size)
redis.call('PEXPIRE', Z, ARGV[6])
redis.call('PEXPIRE', H, ARGV[6])
return {0, count, total}
