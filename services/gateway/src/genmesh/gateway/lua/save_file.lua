-- KEYS = [file meta, file data, owner's file index]; ARGV = id, object JSON, bytes, created ms, ttl ms
redis.call('HSET', KEYS[1], 'object', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[5])
return 1
