-- KEYS: the lock hash, its channel, the fair timeouts under the name, the force-unlocked holds.
-- ARGV: the unlock message, the kind asked (`lock` or `election`), how long an ended hold is
-- remembered (ms). Answers 1 if it was held, else 0.
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
