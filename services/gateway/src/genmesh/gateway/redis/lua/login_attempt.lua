-- One console login attempt, counted against its client address's window and its user name's at
-- once, so that a concurrent burst gets no more than its tries (the check and the count are one step).
-- KEYS = [address counter, user counter] (one hash slot); ARGV = address attempts, user attempts,
-- window ms, 'take' | 'give' ('give': a login that succeeded gives its attempt back)
-- -> {1, 0} taken (or given back) | {0, ms until the fuller window ends} refused
if ARGV[4] == 'give' then
  for i = 1, 2 do
    if tonumber(redis.call('GET', KEYS[i]) or '0') > 0 then redis.call('DECR', KEYS[i]) end
  end
  return {1, 0}
end
local limits = {tonumber(ARGV[1]), tonumber(ARGV[2])}
for i = 1, 2 do
  if tonumber(redis.call('GET', KEYS[i]) or '0') >= limits[i] then return {0, redis.call('PTTL', KEYS[i])} end
end
for i = 1, 2 do
  if redis.call('INCR', KEYS[i]) == 1 then redis.call('PEXPIRE', KEYS[i], ARGV[3]) end
end
return {1, 0}
