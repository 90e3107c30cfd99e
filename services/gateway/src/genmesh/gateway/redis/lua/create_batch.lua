-- ARGV = ttl ms, cap (0: a batch that failed validation, never active), end bound ms, queue cap
-- (enqueued lines per model, 0: none), field, value, ... (fields 'm:<model>' = the batch's lines of each
-- model): the batch object, its lines already loaded. KEYS[7] = owner's batch index, KEYS[8] = owner's
-- batches in progress (id -> end bound ms), KEYS[9] = owner's enqueued lines ('<id>|<model>' -> lines)
-- -> {0} | {1}: the owner already has `cap` batches in progress | {2, model}: its lines past the queue cap
--! include _now
--! include _batch_room
local A, Q, cap = KEYS[8], KEYS[9], tonumber(ARGV[2])
local want = {}
for k = 5, #ARGV, 2 do
  local model = string.match(ARGV[k], '^m:(.*)$')
  if model then want[model] = tonumber(ARGV[k + 1]) end
end
local full, model = room(A, Q, cap, tonumber(ARGV[4]), want)
if full ~= 0 then return {full, model} end
for k = 5, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[k], ARGV[k + 1]) end
for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
local id = redis.call('HGET', KEYS[1], 'id')
local created = tonumber(redis.call('HGET', KEYS[1], 'created_at')) * 1000
redis.call('ZADD', KEYS[7], created, id)
redis.call('PEXPIRE', KEYS[7], ARGV[1])
if cap > 0 then
  redis.call('ZADD', A, tonumber(ARGV[3]), id)
  redis.call('PEXPIRE', A, ARGV[1])
  for m, n in pairs(want) do redis.call('HSET', Q, id .. '|' .. m, n) end
  redis.call('PEXPIRE', Q, ARGV[1])
end
return {0}
