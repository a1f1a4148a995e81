-- Preamble: a function library prepended to the read-write steps that must tell a live read
-- hold from one that ran out; no KEYS or ARGV of its own. Defines reads_now(lock, prefix,
-- hold): whether hold `hold` reads `lock` now. Its field in the hash counts its holds and each
-- has a key `<prefix>:<n>` with its lease; the field outlives the keys (the hash lives as long
-- as its longest hold), so a hold whose keys all ran out has ended though its field is there.
local function reads_now(lock, prefix, hold)
    local count = tonumber(redis.call('hget', lock, hold) or '0')
    for c = 1, count do
        if redis.call('exists', prefix .. ':' .. c) == 1 then
            return true
        end
    end
    return false
end
