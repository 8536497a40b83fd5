-- open_step.lua: open step ARGV[1] under epoch ARGV[2] exactly once.
--
-- Opening the step that is already open (same step and epoch) changes
-- nothing and returns its counters, so a retried call is harmless. Epochs
-- order owners (a new owner's epochs are above every older owner's), so a
-- later epoch opens any step, even an earlier one: a new owner resumes at
-- the journal's step whatever an old owner left open. Within one epoch a
-- later step opens. Either way the tally starts fresh and votes recorded
-- for the old step or epoch are from then on stale. An older epoch, or an
-- older step of the open epoch, is refused: a fenced-out owner cannot
-- reopen anything.
--
-- KEYS[1] step hash (see record_sample.lua)
-- KEYS[2] slots hash
-- KEYS[3] tally hash
-- ARGV[1] step
-- ARGV[2] epoch
-- ARGV[3] key TTL in milliseconds
--
-- Returns {code, step, epoch, next, valid, rf, lead}
--   code  1 opened fresh
--         0 already open: the open step's counters
--        -1 refused: a later epoch, or a later step of this epoch, is open
--           (its step and epoch)

local step = tonumber(ARGV[1])
local epoch = tonumber(ARGV[2])

local m = redis.call('HMGET', KEYS[1], 'step', 'epoch', 'next', 'valid', 'rf', 'lead')
if m[1] then
  local cs, ce = tonumber(m[1]), tonumber(m[2])
  if cs == step and ce == epoch then
    redis.call('PEXPIRE', KEYS[1], ARGV[3])
    return {0, m[1], m[2], tonumber(m[3]), tonumber(m[4]), tonumber(m[5]), tonumber(m[6])}
  end
  if ce > epoch or (ce == epoch and cs > step) then
    return {-1, m[1], m[2], tonumber(m[3]), tonumber(m[4]), tonumber(m[5]), tonumber(m[6])}
  end
end

redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HSET', KEYS[1], 'step', ARGV[1], 'epoch', ARGV[2], 'next', 0, 'valid', 0, 'rf', 0,
  'lead', 0, 'closed', '0')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, ARGV[1], ARGV[2], 0, 0, 0, 0}
