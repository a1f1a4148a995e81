-- Acquire (or extend) a write hold, refusing a name in use as another kind. Answers nil (taken),
-- the hash's PTTL (held), how long the first waiting writer's mark lives (another writer's
-- turn) or DLOCK_GONE (the hold extended is gone, or this hold was force-unlocked). A free lock
-- is not taken while readers that waited behind a writer's hold are marked (they go first), nor
-- while a writer refused before this one is (writers go in turn). A writer that will wait,
-- refused, marks its waiter as waiting (new readers are refused while the mark lives), in its
-- place if it has one, else after the others; taken, its mark and place go.
-- KEYS[1] the lock's hash, KEYS[2] the fair time-outs of that name, KEYS[3] the force-unlocked
--   holds of that name, KEYS[4] the marks of the writers waiting for it, KEYS[5] the marks of
--   its readers waiting, KEYS[6] the order of the writers waiting.
-- ARGV[1] lease in ms, ARGV[2] the hold's write field ('<hold id>:write'), ARGV[3] '1' for an
--   extend of a hold the owner has, ARGV[4] the waiter id, ARGV[5] how long its mark lives in
--   ms, ARGV[6] '1' if the writer will wait.
if was_force_unlocked(KEYS[3], ARGV[2]) then
    return redis.status_reply('DLOCK_GONE')
end
if ARGV[3] == '1' then
    -- An extend acts only on a hold the store still has: an ended hold stays ended.
    local kind = kind_of(KEYS[1], KEYS[2])
    if kind ~= 'write' or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
        return redis.status_reply('DLOCK_GONE')
    end
end
local mode = kind_of(KEYS[1], KEYS[2])
if mode ~= false and mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
local function refused(wait)
    if ARGV[6] == '1' then
        mark_turn(KEYS[6], KEYS[4], ARGV[4], ARGV[5])
    end
    return wait
end
if mode == false then
    local readers_wait = marks_wait(KEYS[5])
    if readers_wait then
        return refused(readers_wait)
    end
    local turn = turn_of_other(KEYS[6], KEYS[4], ARGV[4])
    if turn then
        return refused(turn)
    end
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], '1')
    redis.call('pexpire', KEYS[1], ARGV[1])
    unmark_turn(KEYS[6], KEYS[4], ARGV[4])
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], '1')
    local pttl = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(pttl, tonumber(ARGV[1])))
    return nil
end
return refused(redis.call('pttl', KEYS[1]))
