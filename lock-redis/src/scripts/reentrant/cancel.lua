-- A waiter of the plain lock gives up: its mark goes, and the waiters it held off are told to
-- look again if the lock is free; while it is held, those behind it are told too, as each counts
-- the messages until its turn (`backend/places.rs`). Answers 1 if it was marked, else 0.
-- KEYS[1] the order of the plain lock's waiters, KEYS[2] their marks, KEYS[3] the lock's hash,
--   KEYS[4] its channel.
-- ARGV[1] the waiter id, ARGV[2] the unlock message.
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
    return 0
end
redis.call('zrem', KEYS[2], ARGV[1])
if redis.call('exists', KEYS[3]) == 0 or redis.call('exists', KEYS[1]) == 1 then
    redis.call('publish', KEYS[4], ARGV[2])
end
return 1
