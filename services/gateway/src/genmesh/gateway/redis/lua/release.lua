-- ARGV[8..]=ids: forget requests wherever they are (queued or holding a slot), then hand freed
-- capacity to the next waiters. -> {number of ids known, woken}
--! include _prelude
local was = 0
for k = 8, #ARGV do
  if release(ARGV[k]) > 0 then was = was + 1 end
end
reclaim()
local woken = dispatch()
touch()
return {was, woken}
