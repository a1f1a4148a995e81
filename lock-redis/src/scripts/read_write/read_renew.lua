-- Renew read holds in a batch: each hold key of the owner still there extended to at least the
-- lease (never shortened), and the hash living as long. Answers per lock 1 (renewed), 2 (held by
-- others only) or 0 (gone).
-- KEYS[i] the hash of a lock, for i = 1, 3, 5, ...; KEYS[i + 1] the hold's hold-key prefix.
-- ARGV[1] lease in ms, ARGV[(i + 1) / 2 + 1] the hold id in the lock at KEYS[i].
local renewed = {}
for i = 1, #KEYS, 2 do
    local owner = ARGV[(i + 1) / 2 + 1]
    local count = redis.pcall('hget', KEYS[i], owner)
    local result = 0
    if type(count) == 'string' then
        local lease = tonumber(ARGV[1])
        for c = 1, tonumber(count) do
            local key = KEYS[i + 1] .. ':' .. c
            local left = redis.call('pttl', key)
            if left ~= -2 then
                result = 1
                if left < lease then
                    redis.call('pexpire', key, ARGV[1])
                end
            end
        end
        if result == 1 and redis.call('pttl', KEYS[i]) < lease then
            redis.call('pexpire', KEYS[i], ARGV[1])
        end
    elseif redis.call('exists', KEYS[i]) == 1 then
        result = 2
    end
    table.insert(renewed, result)
end
return renewed
