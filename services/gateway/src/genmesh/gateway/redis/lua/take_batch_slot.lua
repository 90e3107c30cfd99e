-- KEYS = [the model's batch ZSET]; ARGV = cap, lease id, ttl ms -> 1: a batch slot taken | 0: all held
--! include _now
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[3]) * 3, 60000))
return 1
