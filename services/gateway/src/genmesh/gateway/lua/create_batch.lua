-- ARGV = ttl ms, cap (0: a batch that failed validation, never active), end bound ms, field, value, ...:
-- the batch object, its lines already loaded. KEYS[7] = owner's batch index, KEYS[8] = owner's
-- batches in progress (id -> end bound ms) -> 1 | 0: the owner already has `cap` batches in progress
--! include _now
local A, cap = KEYS[8], tonumber(ARGV[2])
if cap > 0 then
  redis.call('ZREMRANGEBYSCORE', A, '-inf', now)
  if redis.call('ZCARD', A) >= cap then return 0 end
end
for k = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[k], ARGV[k + 1]) end
for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
local id = redis.call('HGET', KEYS[1], 'id')
local created = tonumber(redis.call('HGET', KEYS[1], 'created_at')) * 1000
redis.call('ZADD', KEYS[7], created, id)
redis.call('PEXPIRE', KEYS[7], ARGV[1])
if cap > 0 then
  redis.call('ZADD', A, tonumber(ARGV[3]), id)
  redis.call('PEXPIRE', A, ARGV[1])
end
return 1
