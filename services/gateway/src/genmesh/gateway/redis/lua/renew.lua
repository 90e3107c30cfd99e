-- ARGV[8..] = "<id>|<upstream index>" (0: queued) of this gateway's requests: extend their
-- heartbeat and, for running ones, their slot lease. In a new epoch (Redis lost the state) the
-- lease of a running request is re-created. Lost ids (reclaimed, or queued before a restart) are
-- returned, with the epoch and how many other gateways have requests running or queued.
-- -> {epoch, others, lost ids}
--! include _prelude
local resync = known ~= epoch
redis.call('ZREMRANGEBYSCORE', M, '-inf', now)
if #ARGV >= 8 then redis.call('ZADD', M, now + lease_ttl, me) else redis.call('ZREM', M, me) end
local lost = {}
for k = 8, #ARGV do
  local id, i = string.match(ARGV[k], '^(.*)|(%d+)$')
  i = tonumber(i)
  local st = redis.call('HGET', W, id)
  if st then
    redis.call('ZADD', A, now + lease_ttl, id)
    if string.sub(st, 1, 2) == 'g|' then
      redis.call('ZADD', KEYS[5 + tonumber(string.sub(st, 3))], 'XX', now + lease_ttl, id)
    end
  elseif resync and i > 0 and i <= NSLOT then
    grant(id, i)
  else
    lost[#lost + 1] = id
  end
end
local n = redis.call('ZCARD', M)
if #ARGV >= 8 then n = n - 1 end
touch()
return {epoch, n, lost}
