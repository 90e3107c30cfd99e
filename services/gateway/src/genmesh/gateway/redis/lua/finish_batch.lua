-- The batch ends with its output and error files, whose chunks its finisher wrote already
-- (append_chunk.lua, fenced by the batch's finalizer lock). KEYS[7..12] = output meta, output data,
-- error meta, error data, owner's file index, finalizer lock. ARGV = status, now s, completed,
-- failed, file ttl ms, lock token, then per file (output, error): id ('': no such file), object
-- JSON, bytes, chunks -> 1 | 0 ended already (or the batch is gone) | -1 the lock is someone else's
local M = KEYS[1]
local st = redis.call('HGET', M, 'status')
if not st or st == ARGV[1] then return 0 end
if redis.call('GET', KEYS[12]) ~= ARGV[6] then return -1 end
local ttl = tonumber(ARGV[5])
for f = 0, 1 do
  local id = ARGV[7 + 4 * f]
  local meta, dkey = KEYS[7 + 2 * f], KEYS[8 + 2 * f]
  if id ~= '' then
    redis.call('HSET', meta, 'object', ARGV[8 + 4 * f], 'bytes', ARGV[9 + 4 * f], 'chunks', ARGV[10 + 4 * f])
    redis.call('PEXPIRE', meta, ttl)
    redis.call('PEXPIRE', dkey, ttl)
    redis.call('ZADD', KEYS[11], tonumber(ARGV[2]) * 1000, id)
    if redis.call('PTTL', KEYS[11]) < ttl then redis.call('PEXPIRE', KEYS[11], ttl) end
    redis.call('HSET', M, f == 0 and 'output_file_id' or 'error_file_id', id)
  else
    redis.call('DEL', dkey)  -- a previous attempt's leftover
  end
end
redis.call('HSET', M, 'status', ARGV[1], ARGV[1] .. '_at', ARGV[2], 'completed', ARGV[3], 'failed', ARGV[4])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
return 1
