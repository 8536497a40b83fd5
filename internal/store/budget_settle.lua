-- budget_settle.lua: settle reservations whose samples were answered:
-- what they reserved is released, on the job's budget and on the tenant's
-- spend for the day the reservations were taken against; and the job's
-- cost so far (its counted tokens, priced) is spent where it is more than
-- the job spent already: the difference, on the job and on that day. An
-- amount released is never more than the job still holds against that
-- day, so a settle cannot free another job's reservation; a cost lower
-- than what was spent (a new owner's figures without what an earlier one
-- counted but never journaled) spends nothing.
--
-- KEYS[1] job budget hash (see budget_reserve.lua); also: ls (id of the
--         last settle)
-- KEYS[2] tenant day hash
-- ARGV[1] reserved amount to release
-- ARGV[2] the job's cost so far (0: spend nothing)
-- ARGV[3] the caller's lease token
-- ARGV[4] day, YYYY-MM-DD (UTC), the reservations were taken against
-- ARGV[5] settle id (a retried call finds it done and changes nothing)
-- ARGV[6] job hash TTL in milliseconds
-- ARGV[7] day hash TTL in milliseconds
--
-- Returns {code, job limit, job spent, job reserved, day limit, day spent,
-- day reserved}
--   code  1 settled
--         0 already settled under this id (a retry): nothing changed
--        -5 stale: another owner (another lease token) holds the job; its
--           claim released these reservations already

local rel = tonumber(ARGV[1])
local total = tonumber(ARGV[2])
local rfield = 'r:' .. ARGV[4]

local j = redis.call('HMGET', KEYS[1], 'limit', 'spent', 'reserved', 'gen', 'ls', rfield)
local function figures(code)
  local d = redis.call('HMGET', KEYS[2], 'limit', 'spent', 'reserved')
  local jj = redis.call('HMGET', KEYS[1], 'limit', 'spent', 'reserved')
  return {code, tonumber(jj[1]) or 0, tonumber(jj[2]) or 0, tonumber(jj[3]) or 0,
    tonumber(d[1]) or 0, tonumber(d[2]) or 0, tonumber(d[3]) or 0}
end

if j[4] ~= ARGV[3] then
  return figures(-5)
end
if j[5] == ARGV[5] then
  return figures(0)
end

local held = tonumber(j[6]) or 0
if rel > held then
  rel = held
end
if rel > 0 then
  redis.call('HINCRBY', KEYS[1], 'reserved', -rel)
  if redis.call('HINCRBY', KEYS[1], rfield, -rel) <= 0 then
    redis.call('HDEL', KEYS[1], rfield)
  end
  local dr = tonumber(redis.call('HGET', KEYS[2], 'reserved')) or 0
  if dr > 0 then
    redis.call('HINCRBY', KEYS[2], 'reserved', -math.min(rel, dr))
  end
end
local actual = total - (tonumber(j[2]) or 0)
if actual > 0 then
  redis.call('HINCRBY', KEYS[1], 'spent', actual)
  redis.call('HINCRBY', KEYS[2], 'spent', actual)
end
redis.call('HSET', KEYS[1], 'ls', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[7])
return figures(1)
