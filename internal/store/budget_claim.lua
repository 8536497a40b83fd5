-- budget_claim.lua: a job's owner claims its budget: every reservation
-- the job holds is released (an earlier owner's, whose samples can no
-- longer count, or the caller's own at a pause or the end), and owners
-- with an older lease token are fenced out (their reserves and settles are
-- refused from now on). Claiming again under the same token releases
-- again: idempotent.
--
-- KEYS[1]      job budget hash (see budget_reserve.lua)
-- KEYS[2..n]   tenant day hashes of the days ARGV[4..] names, in order
-- ARGV[1]      the caller's lease token
-- ARGV[2]      the job's limit when the hash has none yet (0: none)
-- ARGV[3]      job hash TTL in milliseconds
-- ARGV[4..]    days (YYYY-MM-DD) the job holds reservations against (its
--              r:<day> fields, as read just before)
--
-- Returns {code, job limit, job spent, job reserved}
--   code  1 claimed (reservations released)
--        -5 stale: a later lease token holds the job

local token = tonumber(ARGV[1])
local gen = tonumber(redis.call('HGET', KEYS[1], 'gen'))
if gen and gen > token then
  local j = redis.call('HMGET', KEYS[1], 'limit', 'spent', 'reserved')
  return {-5, tonumber(j[1]) or 0, tonumber(j[2]) or 0, tonumber(j[3]) or 0}
end

for i = 2, #KEYS do
  local rfield = 'r:' .. ARGV[i + 2]
  local held = tonumber(redis.call('HGET', KEYS[1], rfield)) or 0
  if held > 0 then
    local dr = tonumber(redis.call('HGET', KEYS[i], 'reserved')) or 0
    if dr > 0 then
      redis.call('HINCRBY', KEYS[i], 'reserved', -math.min(held, dr))
    end
  end
  redis.call('HDEL', KEYS[1], rfield)
end

-- What is still held is against days the caller did not name (none, unless
-- a reservation came in between the read and this call).
local left = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if string.sub(all[i], 1, 2) == 'r:' then
    left = left + (tonumber(all[i + 1]) or 0)
  end
end
redis.call('HSET', KEYS[1], 'reserved', left, 'gen', ARGV[1])
redis.call('HDEL', KEYS[1], 'last', 'ls')
redis.call('HSETNX', KEYS[1], 'limit', ARGV[2])
redis.call('HSETNX', KEYS[1], 'spent', 0)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local j = redis.call('HMGET', KEYS[1], 'limit', 'spent', 'reserved')
return {1, tonumber(j[1]) or 0, tonumber(j[2]) or 0, tonumber(j[3]) or 0}
