-- Charge audio to a key: KEYS[1] its rate window (this minute's "aud", in ms, which --aspm limits:
-- lua/limit.lua), KEYS[2] its usage; ARGV = audio ms, speech characters, usage TTL s, requests to count
-- (1: an audio endpoint's request, counted here once; 0: a spoken chat turn, counted with its tokens)
local t = redis.call('TIME')
local win = tostring(math.floor(tonumber(t[1]) / 60))
if redis.call('HGET', KEYS[1], 'w') ~= win then redis.call('HSET', KEYS[1], 'w', win, 'req', 0, 'tok', 0, 'aud', 0) end
redis.call('HINCRBY', KEYS[1], 'aud', tonumber(ARGV[1]))
redis.call('EXPIRE', KEYS[1], 120)
if tonumber(ARGV[1]) > 0 then redis.call('HINCRBY', KEYS[2], 'audio_milliseconds', tonumber(ARGV[1])) end
if tonumber(ARGV[2]) > 0 then redis.call('HINCRBY', KEYS[2], 'speech_characters', tonumber(ARGV[2])) end
if tonumber(ARGV[4]) > 0 then redis.call('HINCRBY', KEYS[2], 'requests', tonumber(ARGV[4])) end
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[3]))
return 1
