-- ARGV = ttl ms, field, value, ...: the batch object, its lines already loaded; KEYS[7] = owner's batch index
for k = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[k], ARGV[k + 1]) end
for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
local created = tonumber(redis.call('HGET', KEYS[1], 'created_at')) * 1000
redis.call('ZADD', KEYS[7], created, redis.call('HGET', KEYS[1], 'id'))
redis.call('PEXPIRE', KEYS[7], ARGV[1])
return 1
