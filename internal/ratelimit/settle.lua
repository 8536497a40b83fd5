-- settle.lua: settle a call reserved by reserve.lua: give back what it did
-- not use (a call that used fewer tokens than it reserved, or one
-- cancelled before it was sent), or take more (one that used more).
--
-- KEYS[1] requests TAT (string, ms)
-- KEYS[2] tokens TAT (string, ms)
-- ARGV[1] ms per request (0: no request limit)
-- ARGV[2] ms per token (0: no token limit)
-- ARGV[3] requests given back (0 or 1)
-- ARGV[4] tokens given back (negative: taken)
--
-- Returns 1.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local limits = {
  {KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[3])},
  {KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[4])},
}
for _, l in ipairs(limits) do
  if l[2] > 0 and l[3] ~= 0 then
    local tat = tonumber(redis.call('GET', l[1]) or '0') or 0
    if tat < now then tat = now end
    tat = tat - l[3] * l[2]
    -- A TAT behind now is no debt: reserve.lua starts from now.
    if tat > now then
      redis.call('SET', l[1], string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 60000)
    else
      redis.call('DEL', l[1])
    end
  end
end
return 1
