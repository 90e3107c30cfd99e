-- KEYS = owner's batches in progress, owner's enqueued lines; ARGV = cap, queue cap, model, lines, ...
-- -> as create_batch's check, before a batch's lines are copied in (create_batch checks again, atomically)
--! include _now
--! include _batch_room
local want = {}
for k = 3, #ARGV, 2 do want[ARGV[k]] = tonumber(ARGV[k + 1]) end
local full, model = room(KEYS[1], KEYS[2], tonumber(ARGV[1]), tonumber(ARGV[2]), want)
return {full, model}
