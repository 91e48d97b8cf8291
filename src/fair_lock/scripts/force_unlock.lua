-- force_unlock: free a fair lock whoever holds it, and hand it to the
-- head waiter (queue helpers: queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (list)
-- KEYS[3]  the timeouts (zset)
-- KEYS[4]  the channel stem: "redisson_lock__channel:{<name>}"
-- KEYS[5]  the grants (hash)
-- KEYS[6]  this call's request record (see core/scripts/record_prologue.lua)
-- ARGV[1]  now: the client's clock, epoch milliseconds
-- ARGV[2]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[3]  thread wait in milliseconds (see acquire.lua)
-- ARGV[4]  grant lease in milliseconds
-- ARGV[5]  request record TTL in milliseconds
-- ARGV[6]  request id
--
-- Reply (after the rid): {1, received, timeout, granted} a lock was
-- deleted and handed over to the first waiter still there (see
-- hand_over_next: gone waiters at the head are purged on the way),
-- {0, -1, -1, 0} there was none.
--
-- Retry policy: idempotent by request id (core/call.rs, `Call::run_once`):
-- a copy that arrives again replays the first run's reply instead of
-- deleting the lock of the waiter it was handed to.
local function body()
    if redis.call('del', KEYS[1]) == 1 then
        local received, timeout, granted = hand_over_next(KEYS[1], KEYS[2], KEYS[3], KEYS[5],
            KEYS[4], ARGV[2], tonumber(ARGV[1]), tonumber(ARGV[3]), tonumber(ARGV[4]))
        return {1, received, timeout, granted}
    end
    return {0, -1, -1, 0}
end
