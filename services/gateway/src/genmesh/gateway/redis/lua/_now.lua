-- Redis' own clock in ms (TIME), for the Files and Batch API's scripts (KEYS of one owner's hash slot, {k:<key id>}).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
