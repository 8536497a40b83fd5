-- record_sample.lua: record one sample of the open step idempotently, count
-- the step's samples in index order, test the margin, and close the step
-- exactly once when a candidate leads every other by k valid votes.
--
-- Votes are counted in index order (a sample that arrives early waits in
-- the slots hash until every lower index is in), so a decision is the
-- sequential first-to-ahead-by-k rule applied to the answers by index,
-- whatever order they arrive in.
--
-- KEYS[1] step hash:  step, epoch, next, valid, rf, lead, closed, and the
--                     last decision (dstep, depoch, dwinner, dvotes, dlead,
--                     dnext, dvalid, drf, dtally)
-- KEYS[2] slots hash: index -> "v" .. vote key | "r" .. red-flag reason
-- KEYS[3] tally hash: vote key -> valid votes
-- ARGV[1] step
-- ARGV[2] epoch
-- ARGV[3] index
-- ARGV[4] slot value: "v" .. vote key, or "r" .. reason
-- ARGV[5] k
-- ARGV[6] key TTL in milliseconds
-- ARGV[7] optional guard: the winner the step before (step-1) must have
--         been just decided with, under this epoch, with step open now;
--         else nothing is recorded (code -3). A step sampled ahead from a
--         guess goes in the same pipeline as the step before's samples.
--
-- Returns {code, step, epoch, next, valid, rf, lead, votes, winner, tally}
--   code  1 recorded (next says how many samples are counted so far)
--         2 decided: this sample closed the step; the step hash now holds
--           step+1, fresh. winner/votes/lead/tally describe the decision.
--         3 replay: the step was already decided; the stored decision is
--           returned again (a retried call whose first reply was lost)
--         0 duplicate: this index already has an answer; counters returned
--        -1 stale: the sample is for another step or epoch, or the step
--           was closed without a decision
--        -2 no open step (the job's hot state is gone)
--        -3 not yet: a guarded sample whose guard does not hold
--   tally is a JSON array [key1, votes1, key2, votes2, ...] (codes 2, 3).

local step = ARGV[1]
local epoch = ARGV[2]
local index = ARGV[3]
local value = ARGV[4]
local k = tonumber(ARGV[5])
local ttl = ARGV[6]
local guard = ARGV[7] or ''

local m = redis.call('HMGET', KEYS[1], 'step', 'epoch', 'next', 'valid', 'rf', 'lead', 'closed',
  'dstep', 'depoch', 'dwinner')

local function replay()
  local d = redis.call('HMGET', KEYS[1], 'dstep', 'depoch', 'dnext', 'dvalid', 'drf', 'dlead',
    'dvotes', 'dwinner', 'dtally')
  return {3, d[1], d[2], tonumber(d[3]), tonumber(d[4]), tonumber(d[5]), tonumber(d[6]),
    tonumber(d[7]), d[8], d[9]}
end

if not m[1] then
  return {-2, step, epoch, 0, 0, 0, 0, 0, '', ''}
end
if guard ~= '' and (m[1] ~= step or m[2] ~= epoch or m[8] ~= tostring(tonumber(step) - 1) or
    m[9] ~= epoch or m[10] ~= guard) then
  return {-3, m[1], m[2], tonumber(m[3]), tonumber(m[4]), tonumber(m[5]), tonumber(m[6]), 0, '', ''}
end
if m[8] == step and m[9] == epoch then
  return replay()
end
if m[1] ~= step or m[2] ~= epoch or m[7] == '1' then
  return {-1, m[1], m[2], tonumber(m[3]), tonumber(m[4]), tonumber(m[5]), tonumber(m[6]), 0, '', ''}
end

local nxt = tonumber(m[3])
local valid = tonumber(m[4])
local rf = tonumber(m[5])
local lead = tonumber(m[6])

if redis.call('HSETNX', KEYS[2], index, value) == 0 then
  return {0, step, epoch, nxt, valid, rf, lead, 0, '', ''}
end

-- lead of the top candidate over the runner-up; returns lead, key, votes
local function standings()
  local t = redis.call('HGETALL', KEYS[3])
  local top, second, topKey = 0, 0, ''
  for i = 1, #t, 2 do
    local c = tonumber(t[i + 1])
    if c > top then
      second = top
      top = c
      topKey = t[i]
    elseif c > second then
      second = c
    end
  end
  return top - second, topKey, top, t
end

local decided = false
local winner, votes, tally = '', 0, nil
while true do
  local v = redis.call('HGET', KEYS[2], tostring(nxt))
  if not v then
    break
  end
  nxt = nxt + 1
  if string.sub(v, 1, 1) == 'v' then
    redis.call('HINCRBY', KEYS[3], string.sub(v, 2), 1)
    valid = valid + 1
    local key, top, t
    lead, key, top, t = standings()
    if lead >= k then
      decided = true
      winner, votes, tally = key, top, t
      break
    end
  else
    rf = rf + 1
  end
end

if decided then
  local flat = {}
  for i = 1, #tally, 2 do
    flat[#flat + 1] = tally[i]
    flat[#flat + 1] = tonumber(tally[i + 1])
  end
  local tallyJSON = cjson.encode(flat)
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('HSET', KEYS[1],
    'step', tostring(tonumber(step) + 1), 'next', 0, 'valid', 0, 'rf', 0, 'lead', 0, 'closed', '0',
    'dstep', step, 'depoch', epoch, 'dnext', nxt, 'dvalid', valid, 'drf', rf, 'dlead', lead,
    'dvotes', votes, 'dwinner', winner, 'dtally', tallyJSON)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {2, step, epoch, nxt, valid, rf, lead, votes, winner, tallyJSON}
end

redis.call('HSET', KEYS[1], 'next', nxt, 'valid', valid, 'rf', rf, 'lead', lead)
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
return {1, step, epoch, nxt, valid, rf, lead, 0, '', ''}
