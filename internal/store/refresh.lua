-- refresh.lua: move on the expiry of sample requests a live job still has
-- in flight (a dead coordinator's lapse instead); members no longer held
-- are not added back.
--
-- KEYS[1] fleet in-flight ZSET (see admit.lua)
-- KEYS[2] tenant in-flight ZSET
-- ARGV[1] tenant
-- ARGV[2] lifetime (ms)
-- ARGV[3..] members
--
-- Returns the number of members still held.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = now + tonumber(ARGV[2])
local held = 0
for i = 3, #ARGV do
  local m = ARGV[i]
  if redis.call('ZADD', KEYS[2], 'XX', 'CH', exp, m) == 1 or redis.call('ZSCORE', KEYS[2], m) then
    held = held + 1
    redis.call('ZADD', KEYS[1], 'XX', exp, ARGV[1] .. '/' .. m)
  end
end
-- a key lives as long as its longest-lived member
if held > 0 then
  local life = tonumber(ARGV[2])
  if redis.call('PTTL', KEYS[2]) < life then
    redis.call('PEXPIRE', KEYS[2], life)
  end
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl ~= -2 and ttl < life then
    redis.call('PEXPIRE', KEYS[1], life)
  end
end
return held
