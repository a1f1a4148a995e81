-- Take back one acquire of a reentrant hold: its count one less, and the hold deleted (its
-- release announced) when none is left. Answers 1 (deleted), 0 (counts left) or nil (not held
-- by this hold).
-- KEYS[1] the lock's hash, KEYS[2] its channel.
-- ARGV[1] the unlock message, ARGV[2] the hold id.
if redis.pcall('hexists', KEYS[1], ARGV[2]) ~= 1 then
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
    return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
