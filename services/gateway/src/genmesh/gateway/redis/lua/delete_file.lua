-- KEYS = [file meta, file data, owner's file index, owner's ledger zset, owner's ledger hash];
-- ARGV = id -> 1 deleted | 0 no such file. Its bytes leave the owner's quota ledger with it.
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('ZREM', KEYS[4], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[5], '#', -tonumber(redis.call('HGET', KEYS[5], ARGV[1]) or '0'))
  redis.call('HDEL', KEYS[5], ARGV[1])
  if redis.call('ZCARD', KEYS[4]) == 0 then redis.call('DEL', KEYS[5]) end  -- no empty ledger left behind
end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
