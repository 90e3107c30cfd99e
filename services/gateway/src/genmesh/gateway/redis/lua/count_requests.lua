-- Refused requests that still cost their key (a model it does not serve, inline or in a batch's
-- lines): KEYS = [rate] (tag {k:<id>}); ARGV = how many. They count in this minute's RPM window.
local t = redis.call('TIME')
local win = tostring(math.floor(tonumber(t[1]) / 60))
if redis.call('HGET', KEYS[1], 'w') ~= win then redis.call('HSET', KEYS[1], 'w', win, 'req', 0, 'tok', 0) end
redis.call('EXPIRE', KEYS[1], 120)
return redis.call('HINCRBY', KEYS[1], 'req', tonumber(ARGV[1]))
