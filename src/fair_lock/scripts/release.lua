-- release: give back holds of a fair lock; when freed, tell the head
-- waiter. Redisson RFairLock layout (queue helpers: queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (list)
-- KEYS[3]  the timeouts (zset)
-- KEYS[4]  the channel stem: "redisson_lock__channel:{<name>}"
-- KEYS[5]  the latch of this owner on this lock
-- ARGV[1]  TTL in milliseconds the key keeps while holds remain
-- ARGV[2]  owner field
-- ARGV[3]  how many holds to give back (1; all of them on shutdown)
-- ARGV[4]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[5]  now: the client's clock, epoch milliseconds
-- ARGV[6]  latch TTL in milliseconds
-- ARGV[7]  request id
--
-- Gone waiters at the head are purged first. Reply (after the rid):
-- {0, received, timeout} the field is missing (nothing changed; if the
-- lock is free the head waiter is told, as Redisson's unlock does),
-- {1, left} holds remain, {2, received, timeout} the lock was freed and
-- the head waiter told. `received`: connections the message reached (-1:
-- nobody waits, or nobody was told); `timeout`: the head's timeout.
--
-- Retry policy: idempotent by request id (a re-send never gives back a
-- hold twice).
local function body()
    purge(KEYS[2], KEYS[3], tonumber(ARGV[5]))
    if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
        if redis.call('exists', KEYS[1]) == 0 then
            local received, timeout = notify_head(KEYS[2], KEYS[3], KEYS[4], ARGV[4])
            return {0, received, timeout}
        end
        return {0, -1, -1}
    end
    local left = redis.call('hincrby', KEYS[1], ARGV[2], -tonumber(ARGV[3]))
    if left > 0 then
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1, left}
    end
    redis.call('del', KEYS[1])
    local received, timeout = notify_head(KEYS[2], KEYS[3], KEYS[4], ARGV[4])
    return {2, received, timeout}
end
