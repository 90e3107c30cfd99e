-- The Lua scripts: every multi-key change of the queue, leases and limits happens atomically here.
--
-- Model scripts get ``KEYS = [queue, waiters, alive, rounds, members, slot_1 .. slot_n]`` (all
-- tagged ``{model}``; ADMIT may add the prompt's prefix keys after the slots, shortest prefix first)
-- and ``ARGV = [lease_ttl_ms, state_ttl_ms, channel, caps, epoch, gateway id, others, ...]`` where
-- ``caps`` is ``"c1,c2,..."``: each upstream's max concurrency as this gateway sees it (0 = unhealthy
-- or excluded; its length is the number of slots). Time is Redis' own clock (``TIME``), so replicas
-- never disagree about expiry.
--
-- Epochs: Redis may lose the model's state while streams still run (a restart without persistence).
-- The ``epoch`` field of ``rounds`` names the state's incarnation; the first script to find it
-- missing makes a new one. A gateway whose last known epoch differs must re-register first: ADMIT
-- answers ``{4, epoch}`` instead of granting, and RENEW with the gateway's running streams
-- re-creates their leases, so they are counted again and no upstream exceeds its slots. When the
-- finder had seen other gateways with streams (``others`` > 0, from ``members``), grants wait
-- (``hold``) for half a lease time, within which every live gateway renews.
--
-- Queue order: members are ``<class><round:12><seq:12>|<id>`` with score 0, so the ZSET sorts them
-- lexicographically: by priority class (``0`` = highest), then by fair-queueing round (a tenant's
-- n-th waiting request gets round ``max(current, tenant's last) + 1``: round robin across tenants,
-- FIFO per tenant), then by arrival.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_ttl = tonumber(ARGV[1])
local state_ttl = tonumber(ARGV[2])
local channel = ARGV[3]
local caps = {}
for c in string.gmatch(ARGV[4], '[^,]+') do caps[#caps + 1] = tonumber(c) end
local known, me, others = ARGV[5], ARGV[6], tonumber(ARGV[7])
local Q, W, A, R, M = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local NSLOT = #caps
local NPFX = #KEYS - 5 - NSLOT  -- prefix-affinity keys after the slots (ADMIT only)

local epoch = redis.call('HGET', R, 'epoch')
if not epoch then
  epoch = t[1] .. '.' .. t[2]
  redis.call('HSET', R, 'epoch', epoch)
  if known ~= '' and others > 0 then redis.call('HSET', R, 'hold', now + math.floor(lease_ttl / 2)) end
end
local hold_left = math.max(0, tonumber(redis.call('HGET', R, 'hold') or '0') - now)

local function touch()
  for i = 1, 5 + NSLOT do redis.call('PEXPIRE', KEYS[i], state_ttl) end
end

local function reclaim()
  for i = 1, NSLOT do redis.call('ZREMRANGEBYSCORE', KEYS[5 + i], '-inf', now) end
  local dead = redis.call('ZRANGEBYSCORE', A, '-inf', now)
  for _, id in ipairs(dead) do
    local st = redis.call('HGET', W, id)
    if st and string.sub(st, 1, 2) == 'q|' then redis.call('ZREM', Q, string.sub(st, 3)) end
    redis.call('HDEL', W, id)
  end
  if #dead > 0 then redis.call('ZREMRANGEBYSCORE', A, '-inf', now) end
  return #dead
end

-- The upstream with the fewest leases and a free slot; a tie goes to the first, or with `spread`
-- (a number from the prompt's prefix) to the (spread mod ties)-th, so new prefixes spread out.
local function pick(spread)
  if hold_left > 0 then return nil end
  local ties, bestn = {}, nil
  for i = 1, NSLOT do
    local cap = caps[i] or 0
    if cap > 0 then
      local n = redis.call('ZCARD', KEYS[5 + i])
      if n < cap then
        if bestn == nil or n < bestn then ties, bestn = {i}, n elseif n == bestn then ties[#ties + 1] = i end
      end
    end
  end
  if #ties == 0 then return nil end
  return ties[((spread or 0) % #ties) + 1]
end

-- prefix-affinity: the upstream that served the longest known prefix of this prompt, unless it is
-- full, unhealthy or more than `imbalance` leases ahead of the least-loaded one.
-- -> upstream index or nil, and 'hit' | 'fallback' | 'miss' (no known prefix)
local function pick_affine(imbalance, spread)
  local best = pick(spread)
  if not best then return nil, 'miss' end
  local p = nil
  for k = #KEYS, 6 + NSLOT, -1 do
    local v = redis.call('GET', KEYS[k])
    if v then p = tonumber(v); break end
  end
  if not p then return best, 'miss' end
  local cap = caps[p] or 0
  if cap == 0 then return best, 'fallback' end
  local np = redis.call('ZCARD', KEYS[5 + p])
  if np >= cap or np - redis.call('ZCARD', KEYS[5 + best]) > imbalance then return best, 'fallback' end
  return p, 'hit'
end

local function remember(i, ttl)
  for k = 6 + NSLOT, #KEYS do redis.call('SET', KEYS[k], i, 'PX', ttl) end
end

local function grant(id, i)
  redis.call('ZADD', KEYS[5 + i], now + lease_ttl, id)
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

-- When this gateway's requests lapse unless it renews: the end of its last renewal (its entry in M),
-- entering M when it is not there (or lapsed). A waiter's heartbeat ends there, no later: every lease
-- the gateway holds ends there or after it (granted before the renewal: renewed to it; after: later),
-- and every sweep (reclaim) runs before a grant (dispatch), so a killed gateway's waiter is swept
-- before its leases free a slot, never granted one.
local function gateway_alive_until()
  local mine = tonumber(redis.call('ZSCORE', M, me) or '0')
  if mine > now then return math.min(now + lease_ttl, mine) end
  redis.call('ZADD', M, now + lease_ttl, me)
  return now + lease_ttl
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
  redis.call('ZADD', A, gateway_alive_until(), id)
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
      redis.call('ZREM', KEYS[5 + tonumber(string.sub(st, 3))], id)
      was = 2
    end
    redis.call('HDEL', W, id)
  end
  redis.call('ZREM', A, id)
  return was
end
