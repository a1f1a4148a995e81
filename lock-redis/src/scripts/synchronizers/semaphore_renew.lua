-- Renew permits in a batch: each live permit's lease extended to at least the one given, never
-- shortened. Answers per permit 1 (renewed) or 0 (gone, or its lease ended).
-- KEYS[i] the permits held by semaphore i (permit id -> lease end).
-- ARGV[1] lease in ms, ARGV[i + 1] the permit id in semaphore i (32 hex digits).
local renewed = {}
local expires = now + tonumber(ARGV[1])
for i = 1, #KEYS do
    local id = permit_bytes(ARGV[i + 1])
    local current = redis.pcall('zscore', KEYS[i], id)
    if type(current) == 'string' and tonumber(current) > now then
        if tonumber(current) < expires then
            redis.call('zadd', KEYS[i], expires, id)
        end
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
