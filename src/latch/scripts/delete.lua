-- delete: delete the latch, as Redisson's RCountDownLatch.delete.
--
-- KEYS[1]  the count (string)
-- KEYS[2]  the channel, or left out (see try_set_count.lua)
-- KEYS[#KEYS]  this call's request record (see core/scripts/record_prologue.lua)
-- ARGV[1]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[2]  record TTL in milliseconds
-- ARGV[3]  request id
--
-- Reply (after the rid): {1} the count was deleted and "1" published
-- (Redisson's new-count message: every waiter re-reads the count, finds
-- none and goes on); {0} there was no count, nothing changed.
--
-- Retry policy: idempotent by request id (core/call.rs, `Call::run_once`):
-- a copy that arrives again replays the first run's reply instead of
-- deleting a count set after it.
local function body()
    if redis.call('del', KEYS[1]) == 0 then
        return {0}
    end
    if #KEYS == 3 then
        redis.call(ARGV[1], KEYS[2], '1')
    end
    return {1}
end
