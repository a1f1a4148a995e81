-- Renew fair holds in a batch: each lease extended to at least the one given (never shortened),
-- the lock's waiters' time-outs moved by the lease added. Answers per lock 1 (renewed), 2
-- (another holds it) or 0 (gone).
-- KEYS[i] the hash of a lock, for i = 1, 4, 7, ...; the key after it is its queue (not read),
--   KEYS[i + 2] its time-outs.
-- ARGV[1] lease in ms, ARGV[(i + 2) / 3 + 1] the hold id in the lock at KEYS[i].
local renewed = {}
for i = 1, #KEYS, 3 do
    local owner = ARGV[(i + 2) / 3 + 1]
    local result = 0
    if redis.pcall('hexists', KEYS[i], owner) == 1 then
        local before = redis.call('pttl', KEYS[i])
        local added = tonumber(ARGV[1]) - before
        if added > 0 then
            redis.call('pexpire', KEYS[i], ARGV[1])
            if before > 0 then
                local waiting = redis.call('zrange', KEYS[i + 2], '0', '-1')
                for w = 1, #waiting do
                    redis.call('zincrby', KEYS[i + 2], added, waiting[w])
                end
            end
        end
        result = 1
    elseif redis.call('exists', KEYS[i]) == 1 then
        result = 2
    end
    table.insert(renewed, result)
end
return renewed
