-- A snapshot of an exclusive lock as the kind asked: {held, held by this hold, PTTL}; a name in
-- use as another kind is refused.
-- KEYS[1] the lock's hash, KEYS[2] the fair time-outs of that name.
-- ARGV[1] the hold id, ARGV[2] the kind asked, as the hash's mode says it ('lock', 'fair' or
--   'election').
local kind = kind_of(KEYS[1], KEYS[2])
if kind == false then
    return {0, 0, -2}
end
if kind ~= ARGV[2] and not (kind == 'exclusive' and ARGV[2] ~= 'election') then
    return wrong_kind(kind)
end
if redis.call('exists', KEYS[1]) == 0 then
    return {0, 0, -2}
end
return {1, redis.call('hexists', KEYS[1], ARGV[1]), redis.call('pttl', KEYS[1])}
