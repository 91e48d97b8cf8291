-- acquire: take one permit, Redisson RPermitExpirableSemaphore layout
-- (reclaim.lua is prepended).
--
-- KEYS[1]  the free permit count (string)
-- KEYS[2]  the taken permits: zset "{name}:timeout", member = permit id
--          (16 raw bytes), score = expiry in epoch ms
-- KEYS[3]  the channel "redisson_sc:{name}"
-- KEYS[4]  the request record of this permit (see core/scripts/record_prologue.lua)
-- ARGV[1]  the permit's expiry: now + lease (+ 1: rounded up), epoch ms
-- ARGV[2]  now, epoch ms (the client's clock, as Redisson's)
-- ARGV[3]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[4]  the permit id, 16 raw bytes
-- ARGV[5]  record TTL in milliseconds
-- ARGV[6]  request id
--
-- Reply (after the rid the request record puts in front): {1} the permit is taken;
-- {0, ms} no permit is free and the nearest taken one expires in ms;
-- {0, -1} no permit is free and none of the taken ones expires.
--
-- An id already in the zset is this permit, taken by an earlier request
-- whose reply was lost: it is held (its expiry raised, never lowered), not
-- taken twice.
--
-- Retry policy: idempotent by request id; re-sent with the same rid until
-- a reply arrives (core/call.rs).
local function body()
    reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
    local mine = redis.call('zscore', KEYS[2], ARGV[4])
    if mine then
        if tonumber(mine) < tonumber(ARGV[1]) then
            redis.call('zadd', KEYS[2], ARGV[1], ARGV[4])
        end
        return {1}
    end
    local free = tonumber(redis.call('get', KEYS[1]) or '0')
    if free >= 1 then
        redis.call('decrby', KEYS[1], 1)
        redis.call('zadd', KEYS[2], ARGV[1], ARGV[4])
        local ttl = redis.call('pttl', KEYS[1])
        if ttl > 0 then
            redis.call('pexpire', KEYS[2], ttl)
        end
        return {1}
    end
    local nearest = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
    if nearest[2] and nearest[2] ~= '922337203685477' then
        return {0, math.max(0, tonumber(nearest[2]) - tonumber(ARGV[2]))}
    end
    return {0, -1}
end
