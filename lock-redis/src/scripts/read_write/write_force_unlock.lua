-- KEYS: the lock hash, its channel, the fair timeouts under the name, the force-unlocked holds.
-- ARGV: the unlock message, how long an ended hold is remembered (ms). Answers 1 if it was
-- write-held, else 0.
local mode = kind_of(KEYS[1], KEYS[3])
if mode ~= false and mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
if mode == 'write' then
    note_force_unlocked(KEYS[4], KEYS[1], ARGV[2])
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[2], ARGV[1])
    return 1
end
return 0
