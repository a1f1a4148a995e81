-- Force-unlock a reentrant or fenced lock or an election: remember its holds as ended, delete the
-- hash whoever holds it and announce it. Answers 1 if it was held, else 0.
-- KEYS[1] the lock's hash, KEYS[2] its channel, KEYS[3] the fair time-outs of that name,
--   KEYS[4] the force-unlocked holds of that name.
-- ARGV[1] the unlock message, ARGV[2] the kind asked ('lock' or 'election'), ARGV[3] how long an
--   ended hold is remembered, in ms.
local kind = kind_of(KEYS[1], KEYS[3])
if kind == false then
    return 0
end
if kind ~= ARGV[2] and not (kind == 'exclusive' and ARGV[2] ~= 'election') then
    return wrong_kind(kind)
end
note_force_unlocked(KEYS[4], KEYS[1], ARGV[3])
if redis.call('del', KEYS[1]) == 1 then
    redis.call('publish', KEYS[2], ARGV[1])
    return 1
end
return 0
