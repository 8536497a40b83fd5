-- close_step.lua: close the open step without a decision, exactly once
-- (no consensus within the sample cap, or the job stopped). Samples that
-- arrive afterwards are stale.
--
-- KEYS[1] step hash (see record_sample.lua)
-- KEYS[3] tally hash
-- ARGV[1] step
-- ARGV[2] epoch
-- ARGV[3] key TTL in milliseconds
--
-- Returns {code, tally}
--   code  1 closed now
--         0 was already closed
--        -1 another step or epoch is open, or none
--   tally is a JSON array [key1, votes1, ...] of the closed step.

local m = redis.call('HMGET', KEYS[1], 'step', 'epoch', 'closed')
if m[1] ~= ARGV[1] or m[2] ~= ARGV[2] then
  return {-1, ''}
end
local t = redis.call('HGETALL', KEYS[3])
local flat = {}
for i = 1, #t, 2 do
  flat[#flat + 1] = t[i]
  flat[#flat + 1] = tonumber(t[i + 1])
end
local tallyJSON = '[]'
if #flat > 0 then
  tallyJSON = cjson.encode(flat)
end
if m[3] == '1' then
  return {0, tallyJSON}
end
redis.call('HSET', KEYS[1], 'closed', '1')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, tallyJSON}
