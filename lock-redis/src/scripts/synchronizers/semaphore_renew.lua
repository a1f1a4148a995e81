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
