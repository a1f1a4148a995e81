-- Preamble: a function library prepended to the steps that end holds by force or must not make
-- them again; no KEYS or ARGV of its own, and it expects no globals (it reads the time itself).
-- Defines was_force_unlocked(ended, hold) and note_force_unlocked(ended, lock, lifetime): the
-- holds an operator force-unlocked, in the sorted set `ended` of the name (hold -> epoch ms it is
-- kept until). An acquire under such a hold's id (a copy of the request that made it, arriving
-- late) must not make it again: its thread, renewing it, would go on believing across the
-- holders that came between.
local function was_force_unlocked(ended, hold)
    local kept = redis.call('zscore', ended, hold)
    if kept == false then
        return false
    end
    local clock = redis.call('time')
    return tonumber(kept) > tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
local function note_force_unlocked(ended, lock, lifetime)
    local clock = redis.call('time')
    local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
    redis.call('zremrangebyscore', ended, '-inf', now)
    local noted = false
    if redis.call('type', lock)['ok'] == 'hash' then
        local fields = redis.call('hkeys', lock)
        for i = 1, #fields do
            if fields[i] ~= 'mode' then
                redis.call('zadd', ended, now + tonumber(lifetime), fields[i])
                noted = true
            end
        end
    end
    if noted then
        redis.call('pexpire', ended, lifetime)
    end
end
