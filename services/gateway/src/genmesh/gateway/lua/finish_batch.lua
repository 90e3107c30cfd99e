-- The batch ends with its output and error files, in one step. KEYS[7..11] = output meta, output
-- data, error meta, error data, owner's file index. ARGV = status, now s, completed, failed, file
-- ttl ms, then per file (output, error): id, object JSON, bytes ('' id: no such file)
local M = KEYS[1]
if redis.call('HGET', M, 'status') == ARGV[1] then return 0 end
local ttl = ARGV[5]
for f = 0, 1 do
  local id, obj, data = ARGV[6 + 3 * f], ARGV[7 + 3 * f], ARGV[8 + 3 * f]
  if id ~= '' then
    local meta, dkey = KEYS[7 + 2 * f], KEYS[8 + 2 * f]
    redis.call('HSET', meta, 'object', obj)
    redis.call('SET', dkey, data, 'PX', ttl)
    redis.call('PEXPIRE', meta, ttl)
    redis.call('ZADD', KEYS[11], tonumber(ARGV[2]) * 1000, id)
    redis.call('PEXPIRE', KEYS[11], ttl)
    redis.call('HSET', M, f == 0 and 'output_file_id' or 'error_file_id', id)
  end
end
redis.call('HSET', M, 'status', ARGV[1], ARGV[1] .. '_at', ARGV[2], 'completed', ARGV[3], 'failed', ARGV[4])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
return 1
