-- force_unlock: free a fair lock whoever holds it, and tell the head
-- waiter (queue helpers: queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (list)
-- KEYS[3]  the timeouts (zset)
-- KEYS[4]  the channel stem: "redisson_lock__channel:{<name>}"
-- ARGV[1]  now: the client's clock, epoch milliseconds
-- ARGV[2]  "publish", or "spublish" for sharded pub/sub on a cluster
--
-- Reply: {1, received, timeout} a lock was deleted and the head waiter
-- told (see release.lua), {0, -1, -1} there was none.
--
-- Retry policy: idempotent in effect, but not retried: the caller sees
-- the error.
purge(KEYS[2], KEYS[3], tonumber(ARGV[1]))
if redis.call('del', KEYS[1]) == 1 then
    local received, timeout = notify_head(KEYS[2], KEYS[3], KEYS[4], ARGV[2])
    return {1, received, timeout}
end
return {0, -1, -1}
