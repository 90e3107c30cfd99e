-- Give a ledger entry back (reserve.lua): KEYS = [expiry zset, bytes hash]; ARGV = member -> 1 | 0 not there
local Z, H = KEYS[1], KEYS[2]
if redis.call('ZREM', Z, ARGV[1]) == 0 then return 0 end
redis.call('HINCRBY', H, '#', -tonumber(redis.call('HGET', H, ARGV[1]) or '0'))
redis.call('HDEL', H, ARGV[1])
if redis.call('ZCARD', Z) == 0 then redis.call('DEL', H) end  -- the last entry: no empty ledger is left behind
return 1
