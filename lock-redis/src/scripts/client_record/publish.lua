-- A client's record, replaced whole and set to expire: what inspection reads to name a holder.
-- Answers 1.
-- KEYS[1] the record (a hash).
-- ARGV[1] time to live in ms; ARGV[i], ARGV[i + 1] for i = 2, 4, ...: a field and its value
--   (name, host, pid, and hold:<hold id> -> when the hold was taken, Unix ms).
redis.call('del', KEYS[1])
for i = 2, #ARGV, 2 do
  redis.call('hset', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('pexpire', KEYS[1], ARGV[1])
return 1
