-- Campaign (or extend a leadership): with no leader, this hold leads, takes the next token and
-- is announced.
-- Answers {-1, token} (leading), {PTTL, -1} (another leads) or DLOCK_GONE (the leadership
-- extended is gone, or it was force-unlocked).
-- KEYS[1] the election's hash, KEYS[2] its token counter, KEYS[3] its channel, KEYS[4] the fair
--   time-outs of that name, KEYS[5] the force-unlocked holds of that name.
-- ARGV[1] lease in ms, ARGV[2] the hold id (its field in the hash), ARGV[3] the candidate id,
--   ARGV[4] '1' for an extend of a leadership the owner has.
if was_force_unlocked(KEYS[5], ARGV[2]) then
    return redis.status_reply('DLOCK_GONE')
end
local kind = kind_of(KEYS[1], KEYS[4])
if ARGV[4] == '1' and (kind ~= 'election' or redis.call('hexists', KEYS[1], ARGV[2]) == 0) then
    -- An extend acts only on a leadership the store still has: an ended hold stays ended.
    return redis.status_reply('DLOCK_GONE')
end
if kind ~= false and kind ~= 'election' then
    return wrong_kind(kind)
end
if kind == 'election' then
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[1], ARGV[1])
        end
        return {-1, tonumber(redis.call('get', KEYS[2]) or '0')}
    end
    return {redis.call('pttl', KEYS[1]), -1}
end
local token = next_token(KEYS[2])
redis.call('hset', KEYS[1], ARGV[2], ARGV[3], 'mode', 'election')
redis.call('pexpire', KEYS[1], ARGV[1])
redis.call('publish', KEYS[3], 'leader')
return {-1, token}
