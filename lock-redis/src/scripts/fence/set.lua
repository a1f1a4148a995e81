-- Set a key behind the fence (fence/check ran first): answers {1}.
-- KEYS[1] the key written.
-- ARGV[1] its new value.
redis.call('set', KEYS[1], ARGV[1])
return {1}
