-- Preamble: a function library prepended to the read-write steps that keep or read the marks of
-- waiting writers and readers; no KEYS or ARGV of its own, and it expects no globals (it reads
-- the time itself). Each set of marks is a sorted set (waiter id -> epoch ms its mark lives
-- until). Defines marks_now(): the server's time in ms; marks_wait(marks): how long (ms) the
-- longest live mark lasts, or false if none lives; is_marked(marks, waiter): whether `waiter`'s
-- mark lives; and mark_waiter(marks, waiter, slot): marks `waiter` as waiting for `slot` ms from
-- now (the set lives as long as its last). While a writer's mark lives no new reader is let in,
-- and while a reader's (one that waited behind a writer's hold) lives no writer takes the lock:
-- readers and writers go by turns.
local function marks_now()
    local clock = redis.call('time')
    return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
local function marks_wait(marks)
    local now = marks_now()
    redis.call('zremrangebyscore', marks, '-inf', now)
    local last = redis.call('zrange', marks, '-1', '-1', 'WITHSCORES')
    if last[2] == nil then
        return false
    end
    return tonumber(last[2]) - now
end
local function is_marked(marks, waiter)
    local until_ms = redis.call('zscore', marks, waiter)
    return until_ms ~= false and tonumber(until_ms) > marks_now()
end
local function mark_waiter(marks, waiter, slot)
    redis.call('zadd', marks, marks_now() + tonumber(slot), waiter)
    local last = redis.call('zrange', marks, '-1', '-1', 'WITHSCORES')
    redis.call('pexpireat', marks, tonumber(last[2]))
end
