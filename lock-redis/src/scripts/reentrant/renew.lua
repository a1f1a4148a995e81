-- Renew exclusive holds (reentrant, fenced, write, election) in a batch: each lease extended to
-- at least the one given, never shortened. Answers per lock 1 (renewed), 2 (the key is there
-- without this holder) or 0 (gone).
-- KEYS[i] the hash of lock i.
-- ARGV[1] lease in ms, ARGV[i + 1] the holder's field in lock i.
local renewed = {}
for i = 1, #KEYS do
    if redis.pcall('hexists', KEYS[i], ARGV[i + 1]) == 1 then
        if redis.call('pttl', KEYS[i]) < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[i], ARGV[1])
        end
        renewed[i] = 1
    elseif redis.call('exists', KEYS[i]) == 1 then
        renewed[i] = 2
    else
        renewed[i] = 0
    end
end
return renewed
