-- Sweep expired leases and dead waiters, then hand free capacity to waiters.
-- -> {reclaimed waiters, woken}
--! include _prelude
local dead = reclaim()
local woken = dispatch()
touch()
return {dead, woken}
