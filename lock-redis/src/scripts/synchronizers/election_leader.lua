-- The leader of an election: {candidate id, token, PTTL}, or nil when nobody leads; a name in
-- use as another kind is refused.
-- KEYS[1] the election's hash, KEYS[2] its token counter, KEYS[3] the fair time-outs of that
--   name.
-- ARGV none.
local kind = kind_of(KEYS[1], KEYS[3])
if kind == false then
    return nil
end
if kind ~= 'election' then
    return wrong_kind(kind)
end
local fields = redis.call('hgetall', KEYS[1])
for i = 1, #fields, 2 do
    if fields[i] ~= 'mode' then
        return {fields[i + 1], tonumber(redis.call('get', KEYS[2]) or '0'), redis.call('pttl', KEYS[1])}
    end
end
return nil
