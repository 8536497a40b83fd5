-- admit.lua: admit a job's sample requests under its tenant's limits and
-- the fleet's in-flight capacity, in order: the first ARGV members that
-- fit are taken, the rest refused for now (the caller defers them).
--
-- Gates, in order:
--   1. priority: a job of the tenant with a higher priority is waiting
--      (refused lately): this one yields to it (nothing granted);
--   2. the tenant's in-flight cap;
--   3. the fleet's in-flight capacity, shared weighted-fair: while other
--      tenants wait (were refused lately), a tenant gets at most
--      ceil(capacity * weight / sum of the weights of the waiting tenants
--      and its own) in flight;
--   4. the tenant's token bucket (samples per second).
-- A member already in flight (an index published again) needs a token but
-- no new in-flight room; its expiry is refreshed. A refused call registers
-- the tenant as waiting (demand) and the job's priority, for ARGV[10] ms.
-- Clocks are the server's (TIME), so every coordinator agrees.
--
-- KEYS[1] fleet in-flight ZSET: "<tenant>/<member>" -> expiry (ms)
-- KEYS[2] tenant in-flight ZSET: member -> expiry (ms)
-- KEYS[3] tenant token bucket hash: tokens, ts (ms)
-- KEYS[4] demand ZSET: tenant -> expiry (ms) of its waiting entry
-- KEYS[5] weights hash: tenant -> weight
-- KEYS[6] tenant waiting jobs ZSET: job -> expiry (ms)
-- KEYS[7] tenant waiting priorities hash: job -> priority
-- ARGV[1] tenant
-- ARGV[2] weight (> 0)
-- ARGV[3] tenant in-flight cap (0: none)
-- ARGV[4] fleet in-flight capacity (0: none)
-- ARGV[5] samples per second (0: none)
-- ARGV[6] burst (>= 1)
-- ARGV[7] job
-- ARGV[8] job priority
-- ARGV[9] in-flight entry lifetime (ms)
-- ARGV[10] waiting entry lifetime (ms)
-- ARGV[11..] members, in order
--
-- Returns {granted, reason, retry_ms}
--   reason 0 all granted
--          1 a higher-priority job of the tenant waits
--          2 the tenant's in-flight cap
--          3 the tenant's weighted share of a contended fleet
--          4 the fleet is at capacity
--          5 the tenant's rate
--   retry_ms: when a retry may succeed (the rate's next token), else 0

local tenant = ARGV[1]
local weight = tonumber(ARGV[2])
local tmax = tonumber(ARGV[3])
local fmax = tonumber(ARGV[4])
local rate = tonumber(ARGV[5])
local burst = tonumber(ARGV[6])
local job = ARGV[7]
local prio = tonumber(ARGV[8])
local life = tonumber(ARGV[9])
local wait = tonumber(ARGV[10])
local n = #ARGV - 10

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- 1. priority within the tenant
local gone = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now)
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
  redis.call('HDEL', KEYS[7], unpack(gone))
end
local waiting = redis.call('ZRANGE', KEYS[6], 0, -1)
for _, other in ipairs(waiting) do
  if other ~= job then
    local p = tonumber(redis.call('HGET', KEYS[7], other) or '0') or 0
    if p > prio then
      redis.call('ZADD', KEYS[6], now + wait, job)
      redis.call('HSET', KEYS[7], job, prio)
      redis.call('PEXPIRE', KEYS[6], wait * 2)
      redis.call('PEXPIRE', KEYS[7], wait * 2)
      return {0, 1, 0}
    end
  end
end

-- 2, 3. in-flight room for new members
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local tcount = redis.call('ZCARD', KEYS[2])
local room = n
local limit = 0
if tmax > 0 and tmax - tcount < room then
  room, limit = math.max(0, tmax - tcount), 2
end
if fmax > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  redis.call('HSET', KEYS[5], tenant, weight)
  local free = fmax - redis.call('ZCARD', KEYS[1])
  local why = 4
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  local sumw, others = weight, 0
  for _, other in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    if other ~= tenant then
      others = others + 1
      sumw = sumw + (tonumber(redis.call('HGET', KEYS[5], other) or '1') or 1)
    end
  end
  if others > 0 then
    local share = math.max(1, math.ceil(fmax * weight / sumw))
    if share - tcount < free then
      free, why = share - tcount, 3
    end
  end
  if free < room then
    room, limit = math.max(0, free), why
  end
end

-- 4. tokens
local tokens, have = n, 0
if rate > 0 then
  local b = redis.call('HMGET', KEYS[3], 'tokens', 'ts')
  have = tonumber(b[1]) or burst
  local ts = tonumber(b[2]) or now
  if now > ts then
    have = math.min(burst, have + (now - ts) * rate / 1000)
  end
  tokens = math.floor(have)
end

local granted, reason = 0, 0
for i = 1, n do
  local m = ARGV[10 + i]
  if granted >= tokens then
    reason = 5
    break
  end
  local held = redis.call('ZSCORE', KEYS[2], m)
  if not held then
    if room <= 0 then
      reason = limit
      break
    end
    room = room - 1
  end
  redis.call('ZADD', KEYS[2], now + life, m)
  if fmax > 0 then
    redis.call('ZADD', KEYS[1], now + life, tenant .. '/' .. m)
  end
  granted = granted + 1
end
-- a key lives as long as its longest-lived member
if granted > 0 then
  if redis.call('PTTL', KEYS[2]) < life then
    redis.call('PEXPIRE', KEYS[2], life)
  end
  if fmax > 0 and redis.call('PTTL', KEYS[1]) < life then
    redis.call('PEXPIRE', KEYS[1], life)
  end
end

local retry = 0
if rate > 0 then
  local left = have - granted
  redis.call('HSET', KEYS[3], 'tokens', tostring(left), 'ts', now)
  redis.call('PEXPIRE', KEYS[3], math.ceil(burst / rate * 1000) + 1000)
  if reason == 5 then
    retry = math.max(1, math.ceil((1 - left) / rate * 1000))
  end
end

if reason ~= 0 then
  redis.call('ZADD', KEYS[6], now + wait, job)
  redis.call('HSET', KEYS[7], job, prio)
  redis.call('PEXPIRE', KEYS[6], wait * 2)
  redis.call('PEXPIRE', KEYS[7], wait * 2)
  if reason ~= 5 and fmax > 0 then
    redis.call('ZADD', KEYS[4], now + wait, tenant)
    redis.call('PEXPIRE', KEYS[4], wait * 2)
  end
else
  redis.call('ZREM', KEYS[6], job)
  redis.call('HDEL', KEYS[7], job)
end
return {granted, reason, retry}
