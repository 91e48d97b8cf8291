-- try_set_count: set the count if the latch is not set yet, as Redisson's
-- RCountDownLatch.trySetCount.
--
-- KEYS[1]  the count (string)
-- KEYS[2]  the channel "redisson_countdownlatch__channel__{name}", unless
--          it lies in another hash slot than the count on a cluster: then
--          it is left out and the client publishes (see latch/mod.rs)
-- KEYS[#KEYS]  this call's latch (see core/scripts/record_prologue.lua)
-- ARGV[1]  the count
-- ARGV[2]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[3]  latch TTL in milliseconds
-- ARGV[4]  request id
--
-- Reply (after the rid the latch puts in front): {1} set, and "1" (new
-- count) published; {0} the latch was already set, nothing changed.
--
-- Retry policy: idempotent by request id.
local function body()
    if redis.call('exists', KEYS[1]) == 1 then
        return {0}
    end
    redis.call('set', KEYS[1], ARGV[1])
    if #KEYS == 3 then
        redis.call(ARGV[2], KEYS[2], '1')
    end
    return {1}
end
