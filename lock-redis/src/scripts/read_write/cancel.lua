-- A waiting writer or reader gives up: its mark goes (a writer's place in the writers' order
-- too), and if no writer holds the lock the waiters it held off are told to look again.
-- Answers 1 if it was marked, else 0.
-- KEYS[1] the marks of that side's waiters, KEYS[2] the lock's hash, KEYS[3] the read-write
--   channel, KEYS[4] (a writer's) the order of the writers waiting.
-- ARGV[1] the waiter id, ARGV[2] the message that wakes every waiter.
if KEYS[4] then
    redis.call('zrem', KEYS[4], ARGV[1])
end
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
    return 0
end
-- A mark is not a use of the name: the name may be another kind's by now (a latch's STRING,
-- say), which has no writer to ask about.
if redis.call('type', KEYS[2]).ok ~= 'hash' or redis.call('hget', KEYS[2], 'mode') ~= 'write' then
    redis.call('publish', KEYS[3], ARGV[2])
end
return 1
