-- Preamble: a function library prepended to the steps that hand out fencing tokens; no KEYS or
-- ARGV of its own, and it expects no globals (it reads the time itself).
-- Defines next_token(counter): sets the fencing token counter to the next token and returns it:
-- the counter plus one, or the server's clock in microseconds if that is higher, so a lost or
-- lagging counter cannot hand out a token again.
local function next_token(counter)
    local clock = redis.call('time')
    local micros = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
    local token = math.max(tonumber(redis.call('get', counter) or '0') + 1, micros)
    redis.call('set', counter, string.format('%.0f', token))
    return token
end
