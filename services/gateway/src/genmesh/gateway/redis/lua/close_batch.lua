-- Decide how the batch ends, once: 'completed' (every line has its result), 'cancelled' (no line of
-- a cancelled batch runs any more) or 'expired' (past expires_at). After this no result is written.
-- ARGV = target, now s -> the batch's 'closing' ('' while it may not close)
--! include _now
local M, P, L = KEYS[1], KEYS[4], KEYS[5]
local closing = redis.call('HGET', M, 'closing')
if closing then return closing end
local st = redis.call('HGET', M, 'status')
local target = ARGV[1]
if target == 'completed' and st == 'in_progress' and redis.call('LLEN', P) == 0 and redis.call('ZCARD', L) == 0 then
  redis.call('HSET', M, 'closing', 'completed', 'status', 'finalizing', 'finalizing_at', ARGV[2])
elseif target == 'cancelled' and st == 'cancelling' then
  redis.call('ZREMRANGEBYSCORE', L, '-inf', now)
  if redis.call('ZCARD', L) == 0 then redis.call('HSET', M, 'closing', 'cancelled') end
elseif target == 'expired' and (st == 'in_progress' or st == 'cancelling')
    and now >= tonumber(redis.call('HGET', M, 'expires_at') or '0') * 1000 then
  redis.call('HSET', M, 'closing', 'expired')
end
return redis.call('HGET', M, 'closing') or ''
