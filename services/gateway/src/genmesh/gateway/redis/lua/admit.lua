-- ARGV[8]=id ARGV[9]=tenant ARGV[10]=class ARGV[11]=max queue length ARGV[12]=front ('1': a retry)
-- ARGV[13]=prefix key TTL ms ARGV[14]=max imbalance ARGV[15]=spread (prefix-affinity: prefix keys follow the slots)
-- -> {1, upstream index, 'hit'|'fallback'|'miss'|''} granted | {2, position, hold ms left} queued
--    | {3} queue full | {4, epoch}: nothing done; re-register this gateway's leases (RENEW) in that epoch first
--! include _prelude
if known ~= epoch then return {4, epoch} end
local id, tenant, class, maxq, front = ARGV[8], ARGV[9], ARGV[10], tonumber(ARGV[11]), ARGV[12] == '1'
release(id)
reclaim()
dispatch()
local res
if redis.call('ZCARD', Q) == 0 then
  local i, how = nil, ''
  if NPFX > 0 then i, how = pick_affine(tonumber(ARGV[14]), tonumber(ARGV[15])) else i = pick() end
  if i then
    gateway_alive_until()  -- this gateway is in M: a waiter it queues later lapses no later than this lease
    grant(id, i)
    if NPFX > 0 then remember(i, tonumber(ARGV[13])) end
    res = {1, i, how}
  end
end
if not res then
  if not front and redis.call('ZCARD', Q) >= maxq then
    res = {3}
  else
    res = {2, enqueue(id, tenant, class, front), hold_left}
  end
end
touch()
return res
