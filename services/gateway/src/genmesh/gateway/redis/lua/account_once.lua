-- A batch line's charge, once per line: KEYS = [rate, usage, charged (the batch's SET of charged
-- line indexes)]; ARGV = prompt tokens, completion tokens, usage ttl s, line index, charged ttl ms.
-- Returns -1 when the line was charged already (a second run after its lease lapsed), else the total.
if redis.call('SADD', KEYS[3], ARGV[4]) == 0 then return -1 end
if redis.call('PTTL', KEYS[3]) < 0 then redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[5])) end
--! include _charge
