-- Acquire (or extend) a read hold, refusing a name in use as another kind, and (a new reader)
-- while a writer waits. Answers nil (taken), the hash's PTTL or the waiting writers' mark's
-- (held) or DLOCK_GONE (the hold extended is gone, or this hold was force-unlocked). A reader
-- that will wait, refused by a writer's hold, marks its waiter: it goes in before the next
-- writer, past the writers' marks; taken, its mark goes.
-- KEYS[1] the lock's hash, KEYS[2] this hold's hold-key prefix (':<n>' appended per count),
--   KEYS[3] the fair time-outs of that name, KEYS[4] the force-unlocked holds of that name,
--   KEYS[5] the marks of the writers waiting for it, KEYS[6] the marks of its readers waiting.
-- ARGV[1] lease in ms, ARGV[2] the hold id (its field in the hash), ARGV[3] the write field of
--   the caller's own write hold ('' if it has none), ARGV[4] '1' for an extend of a read hold
--   the owner has, ARGV[5] the waiter id, ARGV[6] how long its mark lives in ms, ARGV[7] '1' if
--   the reader will wait.
if was_force_unlocked(KEYS[4], ARGV[2]) then
    return redis.status_reply('DLOCK_GONE')
end
if ARGV[4] == '1' then
    -- An extend acts only on a hold the store still has (one of its timeout keys lives): an
    -- ended hold stays ended.
    local kind = kind_of(KEYS[1], KEYS[3])
    if not ((kind == 'read' or kind == 'write') and reads_now(KEYS[1], KEYS[2], ARGV[2])) then
        return redis.status_reply('DLOCK_GONE')
    end
end
local mode = kind_of(KEYS[1], KEYS[3])
if mode ~= false and mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
local own_write = mode == 'write' and ARGV[3] ~= '' and redis.call('hexists', KEYS[1], ARGV[3]) == 1
if mode == 'write' and not own_write then
    -- Behind a writer's hold: it goes in before the next writer.
    if ARGV[7] == '1' then
        mark_waiter(KEYS[6], ARGV[5], ARGV[6])
    end
    return redis.call('pttl', KEYS[1])
end
-- Reading already: a live hold, not a field left by one that ran out.
local reading = mode == 'read' and reads_now(KEYS[1], KEYS[2], ARGV[2])
if not own_write and not reading and not is_marked(KEYS[6], ARGV[5]) then
    -- A new reader waits behind a waiting writer.
    local wait = marks_wait(KEYS[5])
    if wait then
        return wait
    end
end
redis.call('zrem', KEYS[6], ARGV[5])
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], '1')
    redis.call('set', KEYS[2] .. ':1', '1', 'px', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'read' or own_write then
    local n = redis.call('hincrby', KEYS[1], ARGV[2], '1')
    redis.call('set', KEYS[2] .. ':' .. n, '1', 'px', ARGV[1])
    local pttl = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(pttl, tonumber(ARGV[1])))
    return nil
end
return redis.call('pttl', KEYS[1])
