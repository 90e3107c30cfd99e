-- Room for one more batch of one owner (create_batch, batch_room). Needs `now` (_now) and:
--   A = the owner's batches in progress (ZSET id -> the latest it can end, ms),
--   Q = the owner's enqueued lines (HASH '<batch id>|<model>' -> lines, one field per model of a batch
--       in progress; a field whose batch left A is stale and dropped here),
--   cap = most batches in progress (0: no check), qcap = most enqueued lines per model (0: no check),
--   want = {model = lines} of the new batch.
-- room() -> 0 (room), 1 (cap batches in progress already), or 2 .. a model (its lines past qcap).
local function room(A, Q, cap, qcap, want)
  if cap <= 0 then return 0 end
  redis.call('ZREMRANGEBYSCORE', A, '-inf', now)
  if redis.call('ZCARD', A) >= cap then return 1 end
  if qcap <= 0 then return 0 end
  local queued, held = {}, redis.call('HGETALL', Q)
  for i = 1, #held, 2 do
    local id, model = string.match(held[i], '^([^|]*)|(.*)$')
    if id and redis.call('ZSCORE', A, id) then
      queued[model] = (queued[model] or 0) + tonumber(held[i + 1])
    else
      redis.call('HDEL', Q, held[i])
    end
  end
  for model, n in pairs(want) do
    if (queued[model] or 0) + n > qcap then return 2, model end
  end
  return 0
end
