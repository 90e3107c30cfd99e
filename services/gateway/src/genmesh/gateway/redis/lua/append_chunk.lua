-- Append one chunk to a file's data LIST while it is being written. KEYS = [data list, fence];
-- ARGV = chunk, ttl ms, fence token ('': no fence), '1': empty the list first (a new attempt), fence
-- ttl ms -> the list's length | -1: the fence is someone else's (another replica took over a batch's
-- finish), nothing written. A fenced writer renews its fence with each chunk.
if ARGV[3] ~= '' then
  if redis.call('GET', KEYS[2]) ~= ARGV[3] then return -1 end
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
end
if ARGV[4] == '1' then redis.call('DEL', KEYS[1]) end
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return n
