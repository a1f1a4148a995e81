-- The fence check, run before a fenced write in the same script (one atomic step): the last key
-- is the resource's fence key and the last argument the writer's fencing token; both are taken
-- off KEYS and ARGV, so the write below sees only its own. A token older than the newest that
-- wrote answers {0, newest} and writes nothing; else the fence keeps the token and the write
-- runs. Tokens are compared as the decimal numbers they are (exact past 2^53).
local fence = table.remove(KEYS)
local token = table.remove(ARGV)
local newest = redis.call('get', fence)
if newest and (#newest > #token or (#newest == #token and newest > token)) then
    return {0, newest}
end
redis.call('set', fence, token)
