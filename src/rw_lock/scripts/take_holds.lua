-- take_holds: a helper put in front of the release scripts (not sent on
-- its own).
--
-- take_holds(gone, only): the first step of both releases, on the lock
-- hash KEYS[1] and field ARGV[2]. Reads the hash's mode: with no hash at
-- all, publishes `gone` on KEYS[2] (with ARGV[4], as Redisson does) and
-- returns nothing; in a mode other than `only` (when given), returns
-- nothing. Then, if the field holds a count c, takes min(ARGV[3], c) holds
-- off it (the field stays, even at 0) and returns the mode, c and the
-- count left; with no such field, returns nothing. Nothing returned:
-- nothing held, nothing changed.
local function take_holds(gone, only)
    local mode = redis.call('hget', KEYS[1], 'mode')
    if mode == false then
        redis.call(ARGV[4], KEYS[2], gone)
        return nil
    end
    if only ~= nil and mode ~= only then
        return nil
    end
    local held = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
    if held == nil then
        return nil
    end
    return mode, held, redis.call('hincrby', KEYS[1], ARGV[2], -math.min(tonumber(ARGV[3]), held))
end
