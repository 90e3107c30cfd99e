-- Claim the next line: lapsed leases (their runner died) go back to the front of the queue first.
-- ARGV = lease ttl ms -> {'ok', index, line} | {'empty', lines running} | {status}: not claimable
--! include _now
local M, I, P, L, R = KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6]
local st = redis.call('HGET', M, 'status')
if st ~= 'in_progress' or redis.call('HEXISTS', M, 'closing') == 1 then return {st or ''} end
local dead = redis.call('ZRANGEBYSCORE', L, '-inf', now)
for _, idx in ipairs(dead) do
  redis.call('ZREM', L, idx)
  if redis.call('HEXISTS', R, idx) == 0 then redis.call('LPUSH', P, idx) end
end
if #dead > 0 then redis.call('HINCRBY', M, 'reclaimed', #dead) end
local idx = redis.call('LPOP', P)
if not idx then return {'empty', redis.call('ZCARD', L)} end
redis.call('ZADD', L, now + tonumber(ARGV[1]), idx)
local ttl = redis.call('PTTL', M)
if ttl > 0 then redis.call('PEXPIRE', L, ttl) end  -- created here: it lives as long as the batch
return {'ok', idx, redis.call('HGET', I, idx)}
