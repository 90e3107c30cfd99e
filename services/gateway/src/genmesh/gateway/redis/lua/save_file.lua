-- A file whose chunks are in its data LIST (append_chunk.lua) becomes visible: its object and its
-- place in the owner's index. KEYS = [file meta, file data, owner's file index]; ARGV = id, object
-- JSON, bytes, chunks, created ms, ttl ms
redis.call('HSET', KEYS[1], 'object', ARGV[2], 'bytes', ARGV[3], 'chunks', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[6]) end
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[6])
return 1
