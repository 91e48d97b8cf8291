-- release: give one permit back, Redisson RPermitExpirableSemaphore layout
-- (reclaim.lua is prepended).
--
-- KEYS[1]  the free permit count
-- KEYS[2]  the taken permits: zset "{name}:timeout"
-- KEYS[3]  the channel "redisson_sc:{name}"
-- KEYS[4]  the request record of this permit
-- ARGV[1]  the permit id, 16 raw bytes
-- ARGV[2]  now, epoch ms (the client's clock)
-- ARGV[3]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[4]  record TTL in milliseconds
-- ARGV[5]  request id
--
-- Reply (after the rid): {2} given back: the free count went up by one and
-- the new count was published, as Redisson's release does; {0} the permit
-- was not held: missing (released, reclaimed) or expired (then the
-- reclaim step has just counted it back). Nothing else changes.
--
-- Retry policy: idempotent by request id (a re-send never gives a permit
-- back twice).
local function body()
    reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3])
    if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then
        return {0}
    end
    local free = redis.call('incrby', KEYS[1], 1)
    redis.call(ARGV[3], KEYS[3], free)
    return {2}
end
