-- KEYS = [concurrent]; ARGV = lease_ttl_ms, ids...: extend the per-key concurrency leases.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for k = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[k]) end
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[1]) * 3, 60000))
return 0
