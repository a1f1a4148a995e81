-- Acquire (or extend) a fair hold, or join the queue to wait for it. Answers nil (taken), a wait
-- hint in ms (held) or DLOCK_GONE (the hold extended is gone, or this hold was force-unlocked).
-- KEYS[1] the lock's hash, KEYS[2] the queue, KEYS[3] the time-outs, KEYS[4] the grant offers,
--   KEYS[5] the force-unlocked holds of that name.
-- ARGV[1] lease in ms, ARGV[2] the waiter id, ARGV[3] its queue slot in ms, ARGV[4] '1' to join
--   the queue if held ('0' to try once), ARGV[5] its grant offer ('<lease ms>:<attempt>:<hold
--   id>', or '0' for none), ARGV[6] the hold id (its field in the hash), ARGV[7] '1' for an
--   extend of a hold the owner has.
if was_force_unlocked(KEYS[5], ARGV[6]) then
    return redis.status_reply('DLOCK_GONE')
end
local kind = kind_of(KEYS[1], KEYS[3])
if ARGV[7] == '1' and ((kind ~= 'fair' and kind ~= 'exclusive') or redis.call('hexists', KEYS[1], ARGV[6]) == 0) then
    -- An extend acts only on a hold the store still has: an ended hold stays ended.
    return redis.status_reply('DLOCK_GONE')
end
if kind ~= false and kind ~= 'fair' and kind ~= 'exclusive' then
    return wrong_kind(kind)
end
-- Drop the waiters at the head of the queue whose time-out has passed, and their grant offers.
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
while true do
    local first = redis.call('lindex', KEYS[2], 0)
    if first == false then break end
    local timeout = redis.call('zscore', KEYS[3], first)
    if timeout ~= false and tonumber(timeout) - 0 > now then break end
    redis.call('zrem', KEYS[3], first)
    redis.call('lpop', KEYS[2])
    redis.call('hdel', KEYS[4], first)
end
local head = redis.call('lindex', KEYS[2], '0')
if redis.call('exists', KEYS[1]) == 0 and (head == false or head == ARGV[2]) then
    local mine = redis.call('zscore', KEYS[3], ARGV[2])
    if head ~= false then
        redis.call('lpop', KEYS[2])
    end
    redis.call('zrem', KEYS[3], ARGV[2])
    redis.call('hdel', KEYS[4], ARGV[2])
    if mine ~= false then
        local shift = now + tonumber(ARGV[1]) - tonumber(mine)
        local waiting = redis.call('zrange', KEYS[3], '0', '-1')
        for i = 1, #waiting do
            redis.call('zincrby', KEYS[3], shift, waiting[i])
        end
    end
    redis.call('hset', KEYS[1], ARGV[6], '1', 'mode', 'fair')
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[6]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[6], '1')
    local before = redis.call('pttl', KEYS[1])
    local added = tonumber(ARGV[1]) - before
    if added > 0 then
        redis.call('pexpire', KEYS[1], ARGV[1])
        if before > 0 then
            local waiting = redis.call('zrange', KEYS[3], '0', '-1')
            for i = 1, #waiting do
                redis.call('zincrby', KEYS[3], added, waiting[i])
            end
        end
    end
    return nil
end
local pttl = redis.call('pttl', KEYS[1])
if ARGV[4] == '1' and redis.call('zscore', KEYS[3], ARGV[2]) == false then
    local last = redis.call('lindex', KEYS[2], '-1')
    local ahead = false
    if last ~= false then
        ahead = redis.call('zscore', KEYS[3], last)
    end
    local base = now + math.max(pttl, 0)
    if ahead ~= false then
        base = tonumber(ahead)
    end
    redis.call('zadd', KEYS[3], base + tonumber(ARGV[3]), ARGV[2])
    redis.call('rpush', KEYS[2], ARGV[2])
    head = redis.call('lindex', KEYS[2], '0')
end
local my_timeout = redis.call('zscore', KEYS[3], ARGV[2])
if ARGV[5] ~= '0' and my_timeout ~= false then
    redis.call('hset', KEYS[4], ARGV[2], ARGV[5])
    local keep = tonumber(my_timeout) - now + tonumber(ARGV[3])
    if redis.call('pttl', KEYS[4]) < keep then
        redis.call('pexpire', KEYS[4], math.max(keep, 1))
    end
elseif my_timeout ~= false then
    redis.call('hdel', KEYS[4], ARGV[2])
end
local hint = -1
if pttl >= 0 then
    hint = pttl
end
if head ~= false and head ~= ARGV[2] then
    local timeout = redis.call('zscore', KEYS[3], head)
    if timeout ~= false then
        local left = tonumber(timeout) - now
        if hint < 0 or left < hint then
            hint = left
        end
    end
end
if hint < 0 then
    hint = tonumber(ARGV[3])
end
return math.max(hint, 1)
