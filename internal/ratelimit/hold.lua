-- hold.lua: no call on the deployment starts before now + ARGV[1] ms (a
-- provider answered 429 or said nothing remains until its reset). Only
-- ever extends a hold.
--
-- KEYS[1] hold (string, ms)
-- ARGV[1] hold length (ms, > 0)
--
-- Returns the hold's end (ms, integer).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local untilMS = now + tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur > untilMS then return math.floor(cur) end
redis.call('SET', KEYS[1], string.format('%.3f', untilMS), 'PX', math.ceil(untilMS - now) + 1000)
return math.floor(untilMS)
