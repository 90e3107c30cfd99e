-- A line's result, written once: the first writer of an index wins, later ones (a line re-run after
-- its lease lapsed) change nothing. ARGV = index, 'o' | 'e', the output line, model
-- -> {written (1 | 0), lines pending, lines running}
local M, P, L, R = KEYS[1], KEYS[4], KEYS[5], KEYS[6]
local written = 0
if redis.call('HEXISTS', M, 'closing') == 0 and redis.call('HSETNX', R, ARGV[1], ARGV[2] .. ARGV[3]) == 1 then
  written = 1
  redis.call('HINCRBY', M, ARGV[2] == 'o' and 'completed' or 'failed', 1)
  redis.call('HINCRBY', M, 'd:' .. ARGV[4], 1)
  local ttl = redis.call('PTTL', M)
  if ttl > 0 then redis.call('PEXPIRE', R, ttl) end  -- created here: it lives as long as the batch
end
redis.call('ZREM', L, ARGV[1])
return {written, redis.call('LLEN', P), redis.call('ZCARD', L)}
