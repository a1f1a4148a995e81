-- Force-unlock the write side: in write mode, remember its holds as ended, delete the hash and
-- announce it. Answers 1 if it was write-held, else 0.
-- KEYS[1] the lock's hash, KEYS[2] its channel, KEYS[3] the fair time-outs of that name,
--   KEYS[4] the force-unlocked holds of that name.
-- ARGV[1] the message announced ('1': every waiter looks again), ARGV[2] how long an ended hold
--   is remembered, in ms.
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
