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
