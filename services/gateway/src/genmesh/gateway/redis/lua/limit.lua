-- KEYS = [rate, concurrent] (tag {k:<id>}); ARGV = rpm, tpm, max_concurrent, id, lease_ttl_ms, state_ttl_ms,
-- audio seconds per minute (0: none; the window's "aud" counts milliseconds, lua/audio_charge.lua)
-- -> {'ok', 0} | {'rpm'|'tpm'|'aspm'|'concurrency', retry_after_s}
local t = redis.call('TIME')
local sec = tonumber(t[1])
local now = sec * 1000 + math.floor(tonumber(t[2]) / 1000)
local rpm, tpm, maxc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local win = tostring(math.floor(sec / 60))
if redis.call('HGET', KEYS[1], 'w') ~= win then redis.call('HSET', KEYS[1], 'w', win, 'req', 0, 'tok', 0, 'aud', 0) end
redis.call('EXPIRE', KEYS[1], 120)
local retry = 60 - (sec % 60)
if tpm > 0 and tonumber(redis.call('HGET', KEYS[1], 'tok')) >= tpm then return {'tpm', retry} end
if rpm > 0 and tonumber(redis.call('HGET', KEYS[1], 'req')) >= rpm then return {'rpm', retry} end
local aspm = tonumber(ARGV[7] or '0')
if aspm > 0 and tonumber(redis.call('HGET', KEYS[1], 'aud') or '0') >= aspm * 1000 then return {'aspm', retry} end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= maxc then return {'concurrency', 1} end
end
redis.call('HINCRBY', KEYS[1], 'req', 1)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[4])
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[6]))
return {'ok', 0}
