"""The Lua scripts: every multi-key change of the queue, leases and limits happens atomically here.

Model scripts get ``KEYS = [queue, waiters, alive, rounds, slot_1 .. slot_n]`` (all tagged
``{model}``) and ``ARGV = [lease_ttl_ms, state_ttl_ms, channel, caps, ...]`` where ``caps`` is
``"c1,c2,..."``: each upstream's max concurrency as this gateway sees it (0 = unhealthy or
excluded). Time is Redis' own clock (``TIME``), so replicas never disagree about expiry.

Queue order: members are ``<class><round:12><seq:12>|<id>`` with score 0, so the ZSET sorts them
lexicographically: by priority class (``0`` = highest), then by fair-queueing round (a tenant's
n-th waiting request gets round ``max(current, tenant's last) + 1``: round robin across tenants,
FIFO per tenant), then by arrival.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_ttl = tonumber(ARGV[1])
local state_ttl = tonumber(ARGV[2])
local channel = ARGV[3]
local caps = {}
for c in string.gmatch(ARGV[4], '[^,]+') do caps[#caps + 1] = tonumber(c) end
local Q, W, A, R = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local NSLOT = #KEYS - 4

local function touch()
  for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], state_ttl) end
end

local function reclaim()
  for i = 1, NSLOT do redis.call('ZREMRANGEBYSCORE', KEYS[4 + i], '-inf', now) end
  local dead = redis.call('ZRANGEBYSCORE', A, '-inf', now)
  for _, id in ipairs(dead) do
    local st = redis.call('HGET', W, id)
    if st and string.sub(st, 1, 2) == 'q|' then redis.call('ZREM', Q, string.sub(st, 3)) end
    redis.call('HDEL', W, id)
  end
  if #dead > 0 then redis.call('ZREMRANGEBYSCORE', A, '-inf', now) end
  return #dead
end

local function pick()
  local best, bestn = nil, nil
  for i = 1, NSLOT do
    local cap = caps[i] or 0
    if cap > 0 then
      local n = redis.call('ZCARD', KEYS[4 + i])
      if n < cap and (best == nil or n < bestn) then best, bestn = i, n end
    end
  end
  return best
end

local function grant(id, i)
  redis.call('ZADD', KEYS[4 + i], now + lease_ttl, id)
  redis.call('HSET', W, id, 'g|' .. i)
  redis.call('ZADD', A, now + lease_ttl, id)
end

local function dispatch()
  local n = 0
  while true do
    local head = redis.call('ZRANGE', Q, 0, 0)
    if #head == 0 then break end
    local i = pick()
    if not i then break end
    local member = head[1]
    redis.call('ZREM', Q, member)
    local id = string.match(member, '|(.+)$')
    local class = string.sub(member, 1, 1)
    local round = tonumber(string.sub(member, 2, 13))
    local cur = tonumber(redis.call('HGET', R, 'c' .. class) or '0')
    if round > cur then redis.call('HSET', R, 'c' .. class, round) end
    grant(id, i)
    redis.call('PUBLISH', channel, id .. '|' .. i)
    n = n + 1
  end
  return n
end

local function enqueue(id, tenant, class, front)
  local tkey = 't' .. class .. ':' .. tenant
  local round = 0
  if not front then
    local cur = tonumber(redis.call('HGET', R, 'c' .. class) or '0')
    local last = tonumber(redis.call('HGET', R, tkey) or '0')
    round = math.max(cur, last) + 1
    redis.call('HSET', R, tkey, round)
  end
  local seq = redis.call('HINCRBY', R, 'seq', 1)
  local member = class .. string.format('%012d', round) .. string.format('%012d', seq) .. '|' .. id
  redis.call('ZADD', Q, 0, member)
  redis.call('HSET', W, id, 'q|' .. member)
  redis.call('ZADD', A, now + lease_ttl, id)
  return redis.call('ZRANK', Q, member)
end

local function release(id)
  local st = redis.call('HGET', W, id)
  local was = 0
  if st then
    if string.sub(st, 1, 2) == 'q|' then
      redis.call('ZREM', Q, string.sub(st, 3))
      was = 1
    else
      redis.call('ZREM', KEYS[4 + tonumber(string.sub(st, 3))], id)
      was = 2
    end
    redis.call('HDEL', W, id)
  end
  redis.call('ZREM', A, id)
  return was
end
"""

# ARGV[5]=id ARGV[6]=tenant ARGV[7]=class ARGV[8]=max queue length ARGV[9]=front ('1': a retry)
# -> {1, upstream index} granted | {2, position} queued | {3} queue full
ADMIT = (
    _PRELUDE
    + """
local id, tenant, class, maxq, front = ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8]), ARGV[9] == '1'
release(id)
reclaim()
dispatch()
local res
if redis.call('ZCARD', Q) == 0 then
  local i = pick()
  if i then
    grant(id, i)
    res = {1, i}
  end
end
if not res then
  if not front and redis.call('ZCARD', Q) >= maxq then
    res = {3}
  else
    res = {2, enqueue(id, tenant, class, front)}
  end
end
touch()
return res
"""
)

# ARGV[5..]=ids: forget requests wherever they are (queued or holding a slot), then hand freed
# capacity to the next waiters. -> {number of ids known, woken}
RELEASE = (
    _PRELUDE
    + """
local was = 0
for k = 5, #ARGV do
  if release(ARGV[k]) > 0 then was = was + 1 end
end
reclaim()
local woken = dispatch()
touch()
return {was, woken}
"""
)

# ARGV[5..] = ids of this gateway's requests (queued or running): extend their heartbeat and,
# for running ones, their slot lease. Lost ids (reclaimed, or Redis restarted) are returned.
RENEW = (
    _PRELUDE
    + """
local lost = {}
for k = 5, #ARGV do
  local id = ARGV[k]
  local st = redis.call('HGET', W, id)
  if st then
    redis.call('ZADD', A, now + lease_ttl, id)
    if string.sub(st, 1, 2) == 'g|' then
      redis.call('ZADD', KEYS[4 + tonumber(string.sub(st, 3))], 'XX', now + lease_ttl, id)
    end
  else
    lost[#lost + 1] = id
  end
end
touch()
return lost
"""
)

# Sweep expired leases and dead waiters, then hand free capacity to waiters.
# -> {reclaimed waiters, woken}
RECLAIM = (
    _PRELUDE
    + """
local dead = reclaim()
local woken = dispatch()
touch()
return {dead, woken}
"""
)

# KEYS = [rate, concurrent] (tag {k:<id>}); ARGV = rpm, tpm, max_concurrent, id, lease_ttl_ms, state_ttl_ms
# -> {'ok', 0} | {'rpm'|'tpm'|'concurrency', retry_after_s}
LIMIT = """
local t = redis.call('TIME')
local sec = tonumber(t[1])
local now = sec * 1000 + math.floor(tonumber(t[2]) / 1000)
local rpm, tpm, maxc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local win = tostring(math.floor(sec / 60))
if redis.call('HGET', KEYS[1], 'w') ~= win then redis.call('HSET', KEYS[1], 'w', win, 'req', 0, 'tok', 0) end
redis.call('EXPIRE', KEYS[1], 120)
local retry = 60 - (sec % 60)
if tpm > 0 and tonumber(redis.call('HGET', KEYS[1], 'tok')) >= tpm then return {'tpm', retry} end
if rpm > 0 and tonumber(redis.call('HGET', KEYS[1], 'req')) >= rpm then return {'rpm', retry} end
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= maxc then return {'concurrency', 1} end
end
redis.call('HINCRBY', KEYS[1], 'req', 1)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[4])
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[6]))
return {'ok', 0}
"""

# KEYS = [rate, usage]; ARGV = prompt tokens, completion tokens, usage ttl s
ACCOUNT = """
local t = redis.call('TIME')
local win = tostring(math.floor(tonumber(t[1]) / 60))
local total = tonumber(ARGV[1]) + tonumber(ARGV[2])
if redis.call('HGET', KEYS[1], 'w') ~= win then redis.call('HSET', KEYS[1], 'w', win, 'req', 0, 'tok', 0) end
redis.call('HINCRBY', KEYS[1], 'tok', total)
redis.call('EXPIRE', KEYS[1], 120)
redis.call('HINCRBY', KEYS[2], 'requests', 1)
redis.call('HINCRBY', KEYS[2], 'prompt_tokens', tonumber(ARGV[1]))
redis.call('HINCRBY', KEYS[2], 'completion_tokens', tonumber(ARGV[2]))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[3]))
return total
"""

# KEYS = [concurrent]; ARGV = lease_ttl_ms, ids...: extend the per-key concurrency leases.
RENEW_CONCURRENT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for k = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[k]) end
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[1]) * 3, 60000))
return 0
"""


@dataclass(frozen=True)
class Scripts:
    admit: AsyncScript
    release: AsyncScript
    renew: AsyncScript
    reclaim: AsyncScript
    limit: AsyncScript
    account: AsyncScript
    renew_concurrent: AsyncScript

    @classmethod
    def register(cls, redis: Redis) -> Scripts:
        return cls(
            admit=redis.register_script(ADMIT),
            release=redis.register_script(RELEASE),
            renew=redis.register_script(RENEW),
            reclaim=redis.register_script(RECLAIM),
            limit=redis.register_script(LIMIT),
            account=redis.register_script(ACCOUNT),
            renew_concurrent=redis.register_script(RENEW_CONCURRENT),
        )
