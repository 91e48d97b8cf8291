-- kick: after a release told a head waiter that was not listening (the
-- message reached nobody: the waiter may be gone), the releasing client
-- runs this once that waiter's timeout has passed: purge gone waiters
-- and, if the lock is still free, tell the new head (queue helpers:
-- queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (list)
-- KEYS[3]  the timeouts (zset)
-- KEYS[4]  the channel stem: "redisson_lock__channel:{<name>}"
-- ARGV[1]  now: the client's clock, epoch milliseconds
-- ARGV[2]  "publish", or "spublish" for sharded pub/sub on a cluster
--
-- Reply: {1, received, timeout} a head was told (see release.lua),
-- {0, -1, -1} the lock is held or nobody waits.
--
-- Retry policy: idempotent in effect (at most one more message to a head
-- that re-checks); not retried.
purge(KEYS[2], KEYS[3], tonumber(ARGV[1]))
if redis.call('exists', KEYS[1]) == 0 then
    local received, timeout = notify_head(KEYS[2], KEYS[3], KEYS[4], ARGV[2])
    if received >= 0 then
        return {1, received, timeout}
    end
end
return {0, -1, -1}
