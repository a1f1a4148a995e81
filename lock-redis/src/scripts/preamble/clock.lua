-- `now` (the server's time in ms) and permit_bytes(hex), the 16 bytes of a permit id.
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local function permit_bytes(hex)
    return (hex:gsub('..', function(pair) return string.char(tonumber(pair, 16)) end))
end
