-- Delete a key behind the fence (fence/check ran first): answers {1, whether it was there}.
-- KEYS[1] the key deleted.
-- ARGV none (the token was the only one).
return {1, redis.call('del', KEYS[1])}
