-- acquire: take (or re-enter) a fair lock, or wait in its queue. Redisson
-- RFairLock layout (queue helpers: queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (list)
-- KEYS[3]  the timeouts (zset)
-- KEYS[4]  the latch of this owner on this lock
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field: "<client-uuid>:<owner-id>"
-- ARGV[3]  now: the client's clock, epoch milliseconds (as Redisson)
-- ARGV[4]  thread wait in milliseconds: how long a waiter counts as alive
--          after it last showed up
-- ARGV[5]  1: wait in the queue if busy; 0: one try, never queued
--          (Redisson's tryLock() without a wait)
-- ARGV[6]  latch TTL in milliseconds
-- ARGV[7]  request id
--
-- Steps:
--  1. A queued caller is alive (it is calling): its timeout becomes
--     now + thread wait, before anything is purged.
--  2. Purge gone waiters at the head.
--  3. Free, and nobody queued or the caller heads the queue: take it (pop
--     the caller, drop its timeout), reply {1, 1}. Every other timeout
--     moves one thread wait earlier, as Redisson's acquire does, but never
--     to less than one thread wait from now (leasehold's waiters keep
--     their own timeouts fresh; this keeps a waiter that just became head
--     from being purged before it can show up).
--  4. The caller holds it: re-enter, reply {1, count}; a queue entry it
--     still has (another wait of the same owner) is dropped.
--  5. Otherwise, busy: queue the caller at the tail (ARGV[5] = 1) if it is
--     not queued yet, and reply {0, hint}: the lock's PTTL if held (-1: no
--     expiry), or, when it is free and another waiter heads the queue, the
--     time until that waiter's timeout (then it may be purged).
--
-- The key's TTL is raised to the lease, never lowered.
--
-- Retry policy: idempotent by request id; re-sent with the same rid until
-- a reply arrives (core/call.rs).
local function body()
    local now = tonumber(ARGV[3])
    local wait = tonumber(ARGV[4])
    local waits = ARGV[5] == '1'
    local queued = redis.call('zscore', KEYS[3], ARGV[2])
    if queued and waits then
        redis.call('zadd', KEYS[3], 'xx', now + wait, ARGV[2])
    end
    purge(KEYS[2], KEYS[3], now)
    local head = redis.call('lindex', KEYS[2], 0)
    if redis.call('exists', KEYS[1]) == 0 and ((not head) or head == ARGV[2]) then
        if head then
            redis.call('lpop', KEYS[2])
        end
        redis.call('zrem', KEYS[3], ARGV[2])
        local rest = redis.call('zrange', KEYS[3], 0, -1, 'withscores')
        for i = 1, #rest, 2 do
            local score = tonumber(rest[i + 1])
            local moved = math.max(score - wait, math.min(score, now + wait))
            if moved ~= score then
                redis.call('zadd', KEYS[3], moved, rest[i])
            end
        end
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1, 1}
    end
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
        if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[1], ARGV[1])
        end
        if queued and waits then
            redis.call('lrem', KEYS[2], 0, ARGV[2])
            redis.call('zrem', KEYS[3], ARGV[2])
        end
        return {1, count}
    end
    local pttl = redis.call('pttl', KEYS[1])
    if not waits then
        return {0, pttl}
    end
    if redis.call('zadd', KEYS[3], 'nx', now + wait, ARGV[2]) == 1 then
        redis.call('rpush', KEYS[2], ARGV[2])
    end
    if pttl ~= -2 then
        return {0, pttl}
    end
    local first = redis.call('zscore', KEYS[3], head)
    return {0, math.max(0, math.floor(tonumber(first) - now))}
end
