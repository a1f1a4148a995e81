-- Acquire (or extend) a fenced hold; a new hold takes the next fencing token. A free lock goes
-- to the waiter marked first, if a mark lives; a waiter refused marks itself if it will wait.
-- Answers {-1, token} (taken), {PTTL or the first waiter's mark's time left, -1} (refused; for
-- a waiter it marked, {that, -2, the live marks before its own}) or DLOCK_GONE (the hold
-- extended is gone, or this hold was force-unlocked).
-- KEYS[1] the lock's hash, KEYS[2] the fair queue of that name, KEYS[3] the fair time-outs of
--   that name, KEYS[4] the fencing token counter, KEYS[5] the force-unlocked holds of that name,
--   KEYS[6] the order of the plain lock's waiters, KEYS[7] their marks.
-- ARGV[1] lease in ms, ARGV[2] the hold id (its field in the hash), ARGV[3] '1' for an extend of
--   a hold the owner has, ARGV[4] the waiter id, ARGV[5] how long its mark lives (ms),
--   ARGV[6] '1' if it will wait.
if was_force_unlocked(KEYS[5], ARGV[2]) then
    return redis.status_reply('DLOCK_GONE')
end
if ARGV[3] == '1' then
    -- An extend acts only on a hold the store still has: an ended hold stays ended.
    local kind = kind_of(KEYS[1], KEYS[3])
    if (kind ~= 'lock' and kind ~= 'exclusive') or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
        return redis.status_reply('DLOCK_GONE')
    end
end
local kind = false
-- EXISTS of two keys counts them: a held fair lock with a queue answers 2.
if redis.call('exists', KEYS[1], KEYS[2]) > 0 then
    kind = kind_of(KEYS[1], KEYS[3])
end
if kind ~= false and kind ~= 'lock' and kind ~= 'exclusive' then
    return wrong_kind(kind)
end
if kind ~= false then
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        redis.call('hincrby', KEYS[1], ARGV[2], '1')
        if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[1], ARGV[1])
        end
        return {-1, tonumber(redis.call('get', KEYS[4]) or '0')}
    end
    if ARGV[6] == '1' then
        return refuse_marked(KEYS[6], KEYS[7], ARGV[4], ARGV[5], redis.call('pttl', KEYS[1]))
    end
    return {redis.call('pttl', KEYS[1]), -1}
end
if redis.call('exists', KEYS[6]) == 1 then
    local turn = turn_of_other(KEYS[6], KEYS[7], ARGV[4])
    if turn then
        if ARGV[6] == '1' then
            return refuse_marked(KEYS[6], KEYS[7], ARGV[4], ARGV[5], turn)
        end
        return {turn, -1}
    end
    unmark_turn(KEYS[6], KEYS[7], ARGV[4])
end
local token = next_token(KEYS[4])
redis.call('hset', KEYS[1], ARGV[2], '1', 'mode', 'lock')
redis.call('pexpire', KEYS[1], ARGV[1])
return {-1, token}
