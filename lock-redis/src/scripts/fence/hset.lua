-- Set one field of a hash behind the fence (fence/check ran first): answers {1, whether the
-- field is new}.
-- KEYS[1] the hash.
-- ARGV[1] the field, ARGV[2] its new value.
return {1, redis.call('hset', KEYS[1], ARGV[1], ARGV[2])}
