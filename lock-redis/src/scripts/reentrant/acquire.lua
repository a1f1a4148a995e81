-- KEYS: the lock hash, the fair queue, the fair timeouts (a fair lock's under the name), the
-- force-unlocked holds. ARGV: the lease (ms), the hold's field, '1' when the step extends a
-- hold the owner has. Answers nil (taken), the holder's PTTL (held) or DLOCK_GONE (the hold
-- extended is gone, or this hold was force-unlocked).
if was_force_unlocked(KEYS[4], ARGV[2]) then
    return redis.status_reply('DLOCK_GONE')
end
if ARGV[3] == '1' then
    -- An extend acts only on a hold the store still has: an ended hold stays ended.
    local kind = kind_of(KEYS[1], KEYS[3])
    if (kind ~= 'lock' and kind ~= 'exclusive') or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
        return redis.status_reply('DLOCK_GONE')
    end
end
if redis.call('exists', KEYS[1], KEYS[2]) == 0 then
    redis.call('hset', KEYS[1], ARGV[2], '1', 'mode', 'lock')
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
local kind = kind_of(KEYS[1], KEYS[3])
if kind == false then
    redis.call('hset', KEYS[1], ARGV[2], '1', 'mode', 'lock')
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if kind ~= 'lock' and kind ~= 'exclusive' then
    return wrong_kind(kind)
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], '1')
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    return nil
end
return redis.call('pttl', KEYS[1])
