-- A line's result, written once: the first writer of an index wins, later ones (a line re-run after
-- its lease lapsed) change nothing. A result that would bring the batch's results past its output
-- quota is not written: the batch closes 'failed' instead, its lines done so far kept for its files.
-- A batch Redis no longer holds (data lost) is never re-created: nothing is written.
-- ARGV = index, 'o' | 'e', the output line, model, output quota (bytes), now s, the errors JSON of
-- a batch past its quota -> {written (1 | 0), lines pending, lines running}
local M, P, L, R = KEYS[1], KEYS[4], KEYS[5], KEYS[6]
if redis.call('EXISTS', M) == 0 then return {0, 0, 0} end
local written = 0
if redis.call('HEXISTS', M, 'closing') == 0 and redis.call('HEXISTS', R, ARGV[1]) == 0 then
  local size = #ARGV[3] + 1
  if tonumber(redis.call('HGET', M, 'obytes') or '0') + size > tonumber(ARGV[5]) then
    redis.call('HSET', M, 'closing', 'failed', 'status', 'finalizing', 'finalizing_at', ARGV[6], 'errors', ARGV[7])
  else
    written = 1
    redis.call('HSET', R, ARGV[1], ARGV[2] .. ARGV[3])
    redis.call('HINCRBY', M, 'obytes', size)
    redis.call('HINCRBY', M, ARGV[2] == 'o' and 'completed' or 'failed', 1)
    redis.call('HINCRBY', M, 'd:' .. ARGV[4], 1)
    local ttl = redis.call('PTTL', M)
    if ttl > 0 then redis.call('PEXPIRE', R, ttl) end  -- created here: it lives as long as the batch
  end
end
redis.call('ZREM', L, ARGV[1])
return {written, redis.call('LLEN', P), redis.call('ZCARD', L)}
