-- KEYS = [file meta, file data, owner's file index]; ARGV = id -> 1 deleted | 0 no such file
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
