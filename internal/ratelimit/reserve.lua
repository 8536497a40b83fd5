-- reserve.lua: reserve one call on a deployment under its fleet-wide
-- limits (requests and tokens per minute), GCRA style: each limit keeps a
-- theoretical arrival time (TAT, ms); a call may start once every TAT
-- minus the burst tolerance is behind it, and pushes each TAT by its cost
-- times the limit's interval. The call is always reserved; the caller
-- waits the returned delay before it sends it (or cancels it with
-- settle.lua when the wait is too long). A hold (a provider's 429 or
-- "remaining 0") delays every call until it passes.
-- Clocks are the server's (TIME), so every voter agrees.
--
-- KEYS[1] requests TAT (string, ms)
-- KEYS[2] tokens TAT (string, ms)
-- KEYS[3] hold: no call starts before this time (string, ms)
-- ARGV[1] ms per request (0: no request limit)
-- ARGV[2] ms per token (0: no token limit)
-- ARGV[3] burst tolerance (ms)
-- ARGV[4] tokens reserved for the call
--
-- Returns the delay before the call may start, in microseconds (integer).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local tau = tonumber(ARGV[3])
local limits = {
  {KEYS[1], tonumber(ARGV[1]), 1},
  {KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[4])},
}

local start = now
local hold = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
if hold > start then start = hold end

local tats = {}
for i, l in ipairs(limits) do
  if l[2] > 0 then
    local tat = tonumber(redis.call('GET', l[1]) or '0') or 0
    if tat < now then tat = now end
    tats[i] = tat
    if tat - tau > start then start = tat - tau end
  end
end

for i, l in ipairs(limits) do
  if l[2] > 0 then
    local tat = tats[i]
    if tat < start then tat = start end
    tat = tat + l[3] * l[2]
    -- Kept a minute past the time it stands for: an idle deployment's
    -- keys go away.
    redis.call('SET', l[1], string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 60000)
  end
end

return math.floor((start - now) * 1000)
