-- Preamble: a function library prepended to the steps that take or read a name as one kind; no
-- KEYS or ARGV of its own, and it expects no globals (it reads the time itself).
-- Defines kind_of(lock, timeouts, mark): what a name is in use as, and wrong_kind(kind): the
-- error of a step refused because of it. A name is one kind at a time; `false` is free. `mark`
-- may be nil (the step only needs to know the name is a counter).
local function kind_of(lock, timeouts, mark)
    local found = redis.call('type', lock)['ok']
    if found == 'hash' then
        return redis.call('hget', lock, 'mode') or 'exclusive'
    end
    if found == 'string' then
        local marked = mark ~= nil and redis.call('get', mark)
        if marked then
            return marked
        end
        if string.match(redis.call('get', lock), '^%-?%d+$') then
            return 'counter'
        end
        return 'key:string'
    end
    if found ~= 'none' then
        return 'key:' .. found
    end
    local last = redis.call('zrange', timeouts, '-1', '-1', 'WITHSCORES')
    if last[2] ~= nil then
        local clock = redis.call('time')
        local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
        if tonumber(last[2]) > now then
            return 'fair'
        end
    end
    return false
end
local function wrong_kind(kind)
    local what = ({
        lock = 'a reentrant or fenced lock',
        exclusive = 'a lock written by Redisson (reentrant or fair)',
        fair = 'a fair lock',
        read = 'a read-write lock',
        write = 'a read-write lock',
        election = 'a leader election',
        semaphore = 'a semaphore',
        latch = 'a count-down latch',
        counter = 'a number: a count of a semaphore or count-down latch written by Redisson, '
            .. 'or other data under this key (lock names are the store\'s keys)',
    })[kind]
    if what == nil then
        if kind == 'key:string' then
            what = 'a Redis string holding other data, not a lock or a count (lock names are '
                .. 'the store\'s keys)'
        elseif string.sub(kind, 1, 4) == 'key:' then
            what = 'a Redis ' .. string.sub(kind, 5) .. ' holding other data, not a lock (lock '
                .. 'names are the store\'s keys)'
        else
            what = 'a Redis hash that is no lock (its mode is ' .. kind .. ')'
        end
    end
    return redis.error_reply('DLOCK_WRONGKIND ' .. what)
end
