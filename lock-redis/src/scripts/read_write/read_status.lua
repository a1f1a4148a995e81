-- A snapshot of a read-write lock's read side: {someone reads, this hold reads, PTTL}; a name in
-- use as another kind is refused.
-- KEYS[1] the lock's hash, KEYS[2] the fair time-outs of that name, KEYS[3] this hold's hold-key
--   prefix.
-- ARGV[1] the hold id.
local mode = kind_of(KEYS[1], KEYS[2])
if mode == false then
    return {0, 0, -2}
end
if mode ~= 'read' and mode ~= 'write' then
    return wrong_kind(mode)
end
local reading = 0
if mode == 'read' or redis.call('hlen', KEYS[1]) > 2 then
    reading = 1
end
-- The hold reads while one of its hold keys lives: its field outlives them when a longer read
-- hold keeps the hash, and a hold whose lease ran out must not be told it still reads.
local mine = 0
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
for c = 1, count do
    if redis.call('exists', KEYS[3] .. ':' .. c) == 1 then
        mine = 1
        break
    end
end
return {reading, mine, redis.call('pttl', KEYS[1])}
