-- KEYS[1] the hash written, ARGV[1] the field, ARGV[2] its new value: answers whether the field
-- is new.
return {1, redis.call('hset', KEYS[1], ARGV[1], ARGV[2])}
