"""The Lua scripts: every multi-key change of the queue, leases and limits happens atomically here.

Model scripts get ``KEYS = [queue, waiters, alive, rounds, members, slot_1 .. slot_n]`` (all
tagged ``{model}``; ADMIT may add the prompt's prefix keys after the slots, shortest prefix first)
and ``ARGV = [lease_ttl_ms, state_ttl_ms, channel, caps, epoch, gateway id, others, ...]`` where
``caps`` is ``"c1,c2,..."``: each upstream's max concurrency as this gateway sees it (0 = unhealthy
or excluded; its length is the number of slots). Time is Redis' own clock (``TIME``), so replicas
never disagree about expiry.

Epochs: Redis may lose the model's state while streams still run (a restart without persistence).
The ``epoch`` field of ``rounds`` names the state's incarnation; the first script to find it
missing makes a new one. A gateway whose last known epoch differs must re-register first: ADMIT
answers ``{4, epoch}`` instead of granting, and RENEW with the gateway's running streams
re-creates their leases, so they are counted again and no upstream exceeds its slots. When the
finder had seen other gateways with streams (``others`` > 0, from ``members``), grants wait
(``hold``) for half a lease time, within which every live gateway renews.

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
      redis.call('ZREM', KEYS[5 + tonumber(string.sub(st, 3))], id)
      was = 2
    end
    redis.call('HDEL', W, id)
  end
  redis.call('ZREM', A, id)
  return was
end
"""

# ARGV[8]=id ARGV[9]=tenant ARGV[10]=class ARGV[11]=max queue length ARGV[12]=front ('1': a retry)
# ARGV[13]=prefix key TTL ms ARGV[14]=max imbalance ARGV[15]=spread (prefix-affinity: prefix keys follow the slots)
# -> {1, upstream index, 'hit'|'fallback'|'miss'|''} granted | {2, position, hold ms left} queued
#    | {3} queue full | {4, epoch}: nothing done; re-register this gateway's leases (RENEW) in that epoch first
ADMIT = (
    _PRELUDE
    + """
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
"""
)

# ARGV[8..]=ids: forget requests wherever they are (queued or holding a slot), then hand freed
# capacity to the next waiters. -> {number of ids known, woken}
RELEASE = (
    _PRELUDE
    + """
local was = 0
for k = 8, #ARGV do
  if release(ARGV[k]) > 0 then was = was + 1 end
end
reclaim()
local woken = dispatch()
touch()
return {was, woken}
"""
)

# ARGV[8..] = "<id>|<upstream index>" (0: queued) of this gateway's requests: extend their
# heartbeat and, for running ones, their slot lease. In a new epoch (Redis lost the state) the
# lease of a running request is re-created. Lost ids (reclaimed, or queued before a restart) are
# returned, with the epoch and how many other gateways have requests running or queued.
# -> {epoch, others, lost ids}
RENEW = (
    _PRELUDE
    + """
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
"""
)

# An interactive request that waits for a slot while batch lines hold slots (queue.py, with
# --batch-preempt): the youngest batch line holding a slot (the largest lease id: ids begin with
# their take time) is preempted: its batch slot is dropped here and '!<lease id>' is published on
# the model's channel, for the runner that runs it to abort the line and put it back (runner.py).
# KEYS = the model's keys, then its batch ZSET; ARGV[8] = the waiting request's id
# -> the preempted line's lease id | '' (the request no longer waits, a slot is free, or no batch
#    line holds a slot)
PREEMPT_BATCH = (
    _PRELUDE
    + """
local st = redis.call('HGET', W, ARGV[8])
if not st or string.sub(st, 1, 2) ~= 'q|' then return '' end
if pick() then return '' end
local B = KEYS[#KEYS]
redis.call('ZREMRANGEBYSCORE', B, '-inf', now)
local best = nil
for _, m in ipairs(redis.call('ZRANGE', B, 0, -1)) do
  local s = redis.call('HGET', W, m)
  if s and string.sub(s, 1, 2) == 'g|' and (best == nil or m > best) then best = m end
end
if not best then return '' end
redis.call('ZREM', B, best)
redis.call('PUBLISH', channel, '!' .. best)
return best
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

# KEYS = the prompt's prefix keys (tag {model}); ARGV = upstream index (1-based), TTL ms: a request
# granted from the queue, remembered as the upstream of its prefix (prefix-affinity).
REMEMBER = """
for k = 1, #KEYS do redis.call('SET', KEYS[k], ARGV[1], 'PX', tonumber(ARGV[2])) end
return #KEYS
"""

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

# KEYS = console history series (tag {console}); ARGV = interval_ms, horizon_ms, value per key.
# Appends one sample per interval across all replicas: the first replica in an interval writes it,
# the others find it and add nothing. -> 1 when sampled, 0 when this interval already had one.
SAMPLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval, horizon = tonumber(ARGV[1]), tonumber(ARGV[2])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] and now - tonumber(last[2]) < interval then return 0 end
for k = 1, #KEYS do
  redis.call('ZADD', KEYS[k], now, now .. ':' .. ARGV[k + 2])
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', now - horizon)
  redis.call('PEXPIRE', KEYS[k], horizon)
end
return 1
"""


# -- the Files and Batch API (batch/): KEYS of one owner's hash slot ({k:<key id>}) --------------

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS = [file meta, file data, owner's file index]; ARGV = id, object JSON, bytes, created ms, ttl ms
SAVE_FILE = """
redis.call('HSET', KEYS[1], 'object', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[5])
return 1
"""

# KEYS = [file meta, file data, owner's file index]; ARGV = id -> 1 deleted | 0 no such file
DELETE_FILE = """
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""

# Batch scripts: KEYS = [meta, input, ids, pending, leases, results] (BatchKeys.all) and more as named.

# ARGV = ttl ms, field, value, ...: the batch object, its lines already loaded; KEYS[7] = owner's batch index
CREATE_BATCH = """
for k = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[k], ARGV[k + 1]) end
for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
local created = tonumber(redis.call('HGET', KEYS[1], 'created_at')) * 1000
redis.call('ZADD', KEYS[7], created, redis.call('HGET', KEYS[1], 'id'))
redis.call('PEXPIRE', KEYS[7], ARGV[1])
return 1
"""

# Claim the next line: lapsed leases (their runner died) go back to the front of the queue first.
# ARGV = lease ttl ms -> {'ok', index, line} | {'empty', lines running} | {status}: not claimable
CLAIM_LINE = (
    _NOW
    + """
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
"""
)

# A line's result, written once: the first writer of an index wins, later ones (a line re-run after
# its lease lapsed) change nothing. ARGV = index, 'o' | 'e', the output line, model
# -> {written (1 | 0), lines pending, lines running}
LINE_DONE = """
local M, P, L, R = KEYS[1], KEYS[4], KEYS[5], KEYS[6]
local written = 0
if redis.call('HEXISTS', M, 'closing') == 0 and redis.call('HSETNX', R, ARGV[1], ARGV[2] .. ARGV[3]) == 1 then
  written = 1
  redis.call('HINCRBY', M, ARGV[2] == 'o' and 'completed' or 'failed', 1)
  redis.call('HINCRBY', M, 'd:' .. ARGV[4], 1)
  local ttl = redis.call('PTTL', M)
  if ttl > 0 then redis.call('PEXPIRE', R, ttl) end  -- created here: it lives as long as the batch
end
redis.call('ZREM', L, ARGV[1])
return {written, redis.call('LLEN', P), redis.call('ZCARD', L)}
"""

# A claimed line given back unrun (its runner stops): to the front of the queue. ARGV = index
RETURN_LINE = """
local M, P, L, R = KEYS[1], KEYS[4], KEYS[5], KEYS[6]
if redis.call('ZREM', L, ARGV[1]) == 1 and redis.call('HGET', M, 'status') == 'in_progress'
    and redis.call('HEXISTS', R, ARGV[1]) == 0 then
  redis.call('LPUSH', P, ARGV[1])
end
return 1
"""

# ARGV = lease ttl ms, indexes...: extend the leases of lines this runner runs (never re-create one)
RENEW_LINES = (
    _NOW
    + """
local n = 0
for k = 2, #ARGV do n = n + redis.call('ZADD', KEYS[5], 'XX', 'CH', now + tonumber(ARGV[1]), ARGV[k]) end
return n
"""
)

# ARGV = now s -> the status after: 'cancelling' when it was validating or in progress
CANCEL_BATCH = """
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'validating' or st == 'in_progress' then
  redis.call('HSET', KEYS[1], 'status', 'cancelling', 'cancelling_at', ARGV[1])
  return 'cancelling'
end
return st or ''
"""

# Decide how the batch ends, once: 'completed' (every line has its result), 'cancelled' (no line of
# a cancelled batch runs any more) or 'expired' (past expires_at). After this no result is written.
# ARGV = target, now s -> the batch's 'closing' ('' while it may not close)
CLOSE_BATCH = (
    _NOW
    + """
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
"""
)

# The batch ends with its output and error files, in one step. KEYS[7..11] = output meta, output
# data, error meta, error data, owner's file index. ARGV = status, now s, completed, failed, file
# ttl ms, then per file (output, error): id, object JSON, bytes ('' id: no such file)
FINISH_BATCH = """
local M = KEYS[1]
if redis.call('HGET', M, 'status') == ARGV[1] then return 0 end
local ttl = ARGV[5]
for f = 0, 1 do
  local id, obj, data = ARGV[6 + 3 * f], ARGV[7 + 3 * f], ARGV[8 + 3 * f]
  if id ~= '' then
    local meta, dkey = KEYS[7 + 2 * f], KEYS[8 + 2 * f]
    redis.call('HSET', meta, 'object', obj)
    redis.call('SET', dkey, data, 'PX', ttl)
    redis.call('PEXPIRE', meta, ttl)
    redis.call('ZADD', KEYS[11], tonumber(ARGV[2]) * 1000, id)
    redis.call('PEXPIRE', KEYS[11], ttl)
    redis.call('HSET', M, f == 0 and 'output_file_id' or 'error_file_id', id)
  end
end
redis.call('HSET', M, 'status', ARGV[1], ARGV[1] .. '_at', ARGV[2], 'completed', ARGV[3], 'failed', ARGV[4])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
return 1
"""

# KEYS = [the model's batch ZSET]; ARGV = cap, lease id, ttl ms -> 1: a batch slot taken | 0: all held
TAKE_BATCH_SLOT = (
    _NOW
    + """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[3]) * 3, 60000))
return 1
"""
)

# KEYS = [the model's batch ZSET]; ARGV = ttl ms, lease ids...: extend this runner's batch slots
RENEW_BATCH_SLOTS = (
    _NOW
    + """
for k = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[1]), ARGV[k]) end
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[1]) * 3, 60000))
return 0
"""
)


@dataclass(frozen=True)
class Scripts:
    admit: AsyncScript
    release: AsyncScript
    renew: AsyncScript
    reclaim: AsyncScript
    limit: AsyncScript
    account: AsyncScript
    renew_concurrent: AsyncScript
    remember: AsyncScript
    sample: AsyncScript
    save_file: AsyncScript
    delete_file: AsyncScript
    create_batch: AsyncScript
    claim_line: AsyncScript
    line_done: AsyncScript
    return_line: AsyncScript
    renew_lines: AsyncScript
    cancel_batch: AsyncScript
    close_batch: AsyncScript
    finish_batch: AsyncScript
    take_batch_slot: AsyncScript
    renew_batch_slots: AsyncScript
    preempt_batch: AsyncScript

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
            remember=redis.register_script(REMEMBER),
            sample=redis.register_script(SAMPLE),
            save_file=redis.register_script(SAVE_FILE),
            delete_file=redis.register_script(DELETE_FILE),
            create_batch=redis.register_script(CREATE_BATCH),
            claim_line=redis.register_script(CLAIM_LINE),
            line_done=redis.register_script(LINE_DONE),
            return_line=redis.register_script(RETURN_LINE),
            renew_lines=redis.register_script(RENEW_LINES),
            cancel_batch=redis.register_script(CANCEL_BATCH),
            close_batch=redis.register_script(CLOSE_BATCH),
            finish_batch=redis.register_script(FINISH_BATCH),
            take_batch_slot=redis.register_script(TAKE_BATCH_SLOT),
            renew_batch_slots=redis.register_script(RENEW_BATCH_SLOTS),
            preempt_batch=redis.register_script(PREEMPT_BATCH),
        )
