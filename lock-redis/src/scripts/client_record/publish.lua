-- A client's record, replaced whole and set to expire: what inspection reads to name a holder.
-- KEYS[1] the record · ARGV[1] time to live, ms · ARGV[2..] field and value pairs: name, host,
-- pid, and hold:<hold id> → when the hold was taken (Unix ms). Answers 1.
redis.call('del', KEYS[1])
for i = 2, #ARGV, 2 do
  redis.call('hset', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('pexpire', KEYS[1], ARGV[1])
return 1
