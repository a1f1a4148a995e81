-- Preamble: the fence check, run first in a fenced write's script (one atomic step). It takes
-- the last key (the resource's fence key, as `fence`) and the last argument (the writer's
-- fencing token, as `token`) off KEYS and ARGV, so the write after it sees only its own. A
-- token older than `newest`, the newest token that wrote, answers {0, newest} and writes
-- nothing; else the fence keeps the token and the write runs. Tokens compare as the decimal
-- numbers they are (exact past 2^53).
local fence = table.remove(KEYS)
local token = table.remove(ARGV)
local newest = redis.call('get', fence)
if newest and (#newest > #token or (#newest == #token and newest > token)) then
    return {0, newest}
end
redis.call('set', fence, token)
