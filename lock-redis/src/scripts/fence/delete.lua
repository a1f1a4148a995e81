-- KEYS[1] the key deleted: answers whether it was there.
return {1, redis.call('del', KEYS[1])}
