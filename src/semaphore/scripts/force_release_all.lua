-- force_release_all: free every permit out, whoever holds it (an
-- operator's tool: `leasehold unlock --force` on a semaphore).
--
-- KEYS[1]  the free permit count
-- KEYS[2]  the taken permits: zset "{name}:timeout"
-- KEYS[3]  the channel "redisson_sc:{name}"
-- KEYS[4]  this call's request record (see core/scripts/record_prologue.lua)
-- ARGV[1]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[2]  record TTL in milliseconds
-- ARGV[3]  request id
--
-- Every member of the zset (expired or not: an expired one would go back
-- to the count at the next reclaim anyway) goes back to the free count,
-- the zset is deleted and the number freed published (that many waiters
-- per client may retry). Reply (after the rid): {1, n} n permits were out
-- and are free now; {0, 0} none was out, nothing changed.
--
-- Retry policy: idempotent by request id (core/call.rs, `Call::run_once`):
-- a copy that arrives again replays the first run's reply instead of
-- freeing permits taken after it.
local function body()
    local n = redis.call('zcard', KEYS[2])
    if n == 0 then
        return {0, 0}
    end
    redis.call('del', KEYS[2])
    redis.call('incrby', KEYS[1], n)
    redis.call(ARGV[1], KEYS[3], n)
    return {1, n}
end
