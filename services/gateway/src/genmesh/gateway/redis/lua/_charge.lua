-- Charge tokens to a key: KEYS[1] its rate window (this minute's "tok"), KEYS[2] its usage;
-- ARGV[1] prompt tokens, ARGV[2] completion tokens, ARGV[3] the usage's TTL (s). Returns the total.
local t = redis.call('TIME')
local win = tostring(math.floor(tonumber(t[1]) / 60))
local total = tonumber(ARGV[1]) + tonumber(ARGV[2])
if redis.call('HGET', KEYS[1], 'w') ~= win then redis.call('HSET', KEYS[1], 'w', win, 'req', 0, 'tok', 0, 'aud', 0) end
redis.call('HINCRBY', KEYS[1], 'tok', total)
redis.call('EXPIRE', KEYS[1], 120)
redis.call('HINCRBY', KEYS[2], 'requests', 1)
redis.call('HINCRBY', KEYS[2], 'prompt_tokens', tonumber(ARGV[1]))
redis.call('HINCRBY', KEYS[2], 'completion_tokens', tonumber(ARGV[2]))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[3]))
return total
