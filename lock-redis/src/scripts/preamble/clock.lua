-- Preamble: a function library prepended to the steps that need the server's time as a number
-- or a permit id's bytes; no KEYS or ARGV of its own, and it expects no globals.
-- Defines `clock` (the server's TIME reply), `now` (that time in ms) and permit_bytes(hex), the
-- 16 bytes of a permit id given as 32 hex digits.
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local function permit_bytes(hex)
    return (hex:gsub('..', function(pair) return string.char(tonumber(pair, 16)) end))
end
