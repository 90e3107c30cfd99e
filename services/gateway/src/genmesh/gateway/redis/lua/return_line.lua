-- A claimed line given back unrun (its runner stops): to the front of the queue. ARGV = index
local M, P, L, R = KEYS[1], KEYS[4], KEYS[5], KEYS[6]
if redis.call('ZREM', L, ARGV[1]) == 1 and redis.call('HGET', M, 'status') == 'in_progress'
    and redis.call('HEXISTS', R, ARGV[1]) == 0 then
  redis.call('LPUSH', P, ARGV[1])
end
return 1
