-- ARGV = lease ttl ms, indexes...: extend the leases of lines this runner runs (never re-create one)
--! include _now
local n = 0
for k = 2, #ARGV do n = n + redis.call('ZADD', KEYS[5], 'XX', 'CH', now + tonumber(ARGV[1]), ARGV[k]) end
return n
