-- Release a hold by handing the lock to a successor hold in place (nobody is woken), with the
-- unlock latch; unless another waiter is marked before the successor's waiter (it takes the lock
-- once free): then the hold is released and the release announced, as `release` does. Answers
-- 2 (handed over), 1 (released), nil (not held) or what the latch kept from an earlier attempt.
-- KEYS[1] the lock's hash, KEYS[2] this request's unlock latch, KEYS[3] the order of the plain
--   lock's waiters, KEYS[4] their marks, KEYS[5] the lock's channel.
-- ARGV[1] the hold id, ARGV[2] the latch's lifetime in ms, ARGV[3] the successor's hold id,
--   ARGV[4] the successor's lease in ms, ARGV[5] the successor's waiter id, ARGV[6] the unlock
--   message.
local done = redis.call('get', KEYS[2])
if done ~= false then
    return tonumber(done)
end
-- A hold's id is its own: a key that is not a hash (the name used as another kind) has none.
if redis.pcall('hexists', KEYS[1], ARGV[1]) ~= 1 then
    return nil
end
if redis.call('exists', KEYS[3]) == 1 then
    if turn_of_other(KEYS[3], KEYS[4], ARGV[5]) then
        redis.call('del', KEYS[1])
        redis.call('publish', KEYS[5], ARGV[6])
        redis.call('set', KEYS[2], '1', 'px', ARGV[2])
        return 1
    end
    unmark_turn(KEYS[3], KEYS[4], ARGV[5])
end
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], ARGV[3], '1', 'mode', 'lock')
redis.call('pexpire', KEYS[1], ARGV[4])
redis.call('set', KEYS[2], '2', 'px', ARGV[2])
return 2
