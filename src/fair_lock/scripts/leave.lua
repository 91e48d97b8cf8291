-- leave: a waiter that stopped waiting (timed out, failed, dropped) leaves
-- the queue at once (Redisson's acquireFailed, without moving the others'
-- timeouts: leasehold's waiters keep their own fresh). If it headed the
-- queue of a free lock, the new head is told (queue helpers: queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (list)
-- KEYS[3]  the timeouts (zset)
-- KEYS[4]  the channel stem: "redisson_lock__channel:{<name>}"
-- ARGV[1]  the waiter's field
-- ARGV[2]  now: the client's clock, epoch milliseconds
-- ARGV[3]  "publish", or "spublish" for sharded pub/sub on a cluster
--
-- Reply: {1, received, timeout} the new head was told (see release.lua),
-- {0, -1, -1} nobody needed telling.
--
-- Retry policy: idempotent (removing an absent entry changes nothing).
local head = redis.call('lindex', KEYS[2], 0)
redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
if head == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
    purge(KEYS[2], KEYS[3], tonumber(ARGV[2]))
    local received, timeout = notify_head(KEYS[2], KEYS[3], KEYS[4], ARGV[3])
    if received >= 0 then
        return {1, received, timeout}
    end
end
return {0, -1, -1}
