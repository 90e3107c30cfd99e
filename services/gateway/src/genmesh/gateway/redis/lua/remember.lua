-- KEYS = the prompt's prefix keys (tag {model}); ARGV = upstream index (1-based), TTL ms: a request
-- granted from the queue, remembered as the upstream of its prefix (prefix-affinity).
for k = 1, #KEYS do redis.call('SET', KEYS[k], ARGV[1], 'PX', tonumber(ARGV[2])) end
return #KEYS
