-- budget_reserve.lua: reserve a wave's cost, an upper bound of what its
-- sample requests can cost, against the job's budget and the tenant's
-- spend for the day, atomically: both or neither. A reservation is only
-- taken while spent + reserved + amount stays within each limit, so what
-- is spent never exceeds a limit, however many coordinators reserve at
-- once. Money is in integer nano-dollars.
--
-- KEYS[1] job budget hash:  limit, spent, reserved, gen (lease token of the
--                           owner), last (id of the last reservation),
--                           r:<day> (what is reserved against that day)
-- KEYS[2] tenant day hash:  limit, spent, reserved
-- ARGV[1] amount (> 0)
-- ARGV[2] the job's limit when the hash has none yet (the spec's budget;
--         0: none of its own)
-- ARGV[3] the tenant's limit for the day now (its quota; 0: none)
-- ARGV[4] the caller's lease token
-- ARGV[5] day, YYYY-MM-DD (UTC)
-- ARGV[6] reservation id (a retried call finds it taken and changes nothing)
-- ARGV[7] job hash TTL in milliseconds
-- ARGV[8] day hash TTL in milliseconds
--
-- Returns {code, job limit, job spent, job reserved, day limit, day spent,
-- day reserved}
--   code  1 reserved
--         0 already reserved under this id (a retry): nothing changed
--        -1 the job's budget is exhausted: spent + amount > limit
--        -2 the job's budget is busy: only its own reservations in flight
--           stand in the way (they may settle for less)
--        -3 the tenant's spend for the day is exhausted
--        -4 the tenant's spend for the day is busy: reservations in flight
--           stand in the way
--        -5 stale: another owner (another lease token) holds the job

local amount = tonumber(ARGV[1])
local token = ARGV[4]
local rfield = 'r:' .. ARGV[5]

redis.call('HSETNX', KEYS[1], 'limit', ARGV[2])
local j = redis.call('HMGET', KEYS[1], 'limit', 'spent', 'reserved', 'gen', 'last')
local jl, js, jr = tonumber(j[1]) or 0, tonumber(j[2]) or 0, tonumber(j[3]) or 0
local dl = tonumber(ARGV[3])
local d = redis.call('HMGET', KEYS[2], 'spent', 'reserved')
local ds, dr = tonumber(d[1]) or 0, tonumber(d[2]) or 0

local function reply(code)
  return {code, jl, js, jr, dl, ds, dr}
end

if j[4] and j[4] ~= token then
  return reply(-5)
end
if j[5] == ARGV[6] then
  return reply(0)
end
if jl > 0 and js + jr + amount > jl then
  if js + amount > jl then
    return reply(-1)
  end
  return reply(-2)
end
if dl > 0 and ds + dr + amount > dl then
  if ds + amount > dl then
    return reply(-3)
  end
  return reply(-4)
end

redis.call('HSET', KEYS[1], 'gen', token, 'last', ARGV[6])
jr = redis.call('HINCRBY', KEYS[1], 'reserved', amount)
redis.call('HINCRBY', KEYS[1], rfield, amount)
redis.call('PEXPIRE', KEYS[1], ARGV[7])
redis.call('HSET', KEYS[2], 'limit', ARGV[3])
dr = redis.call('HINCRBY', KEYS[2], 'reserved', amount)
redis.call('PEXPIRE', KEYS[2], ARGV[8])
return reply(1)
