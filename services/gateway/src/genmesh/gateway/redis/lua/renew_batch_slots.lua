-- KEYS = [the model's batch ZSET]; ARGV = ttl ms, lease ids...: extend this runner's batch slots
--! include _now
for k = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[k]) end
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[1]) * 3, 60000))
return 0
