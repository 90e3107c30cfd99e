-- ARGV = now s -> the status after: 'cancelling' when it was validating or in progress
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'validating' or st == 'in_progress' then
  redis.call('HSET', KEYS[1], 'status', 'cancelling', 'cancelling_at', ARGV[1])
  return 'cancelling'
end
return st or ''
