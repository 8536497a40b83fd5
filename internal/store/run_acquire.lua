-- run_acquire.lua: take (or keep) one of the tenant's running-job slots
-- for a job, fleet-wide. A job already holding a slot keeps it and its
-- expiry is moved on (the coordinator refreshes it with the job's lease);
-- a slot whose expiry passed is free (its coordinator died).
--
-- KEYS[1] tenant running ZSET: job -> expiry (ms)
-- ARGV[1] job
-- ARGV[2] the tenant's running-job cap (0: none; the slot is still kept)
-- ARGV[3] slot lifetime (ms)
--
-- Returns {ok, running, fresh}
--   ok       1 taken or kept, 0 refused (the tenant is at its cap)
--   running  the tenant's running jobs after the call
--   fresh    1 when this call took the slot (0: the job held it already,
--            maybe through another coordinator: do not give it back on a
--            lost lease race)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max = tonumber(ARGV[2])
local life = tonumber(ARGV[3])

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local count = redis.call('ZCARD', KEYS[1])
local fresh = 0
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if max > 0 and count >= max then
    return {0, count, 0}
  end
  count = count + 1
  fresh = 1
end
redis.call('ZADD', KEYS[1], now + life, ARGV[1])
if redis.call('PTTL', KEYS[1]) < life then
  redis.call('PEXPIRE', KEYS[1], life)
end
return {1, count, fresh}
