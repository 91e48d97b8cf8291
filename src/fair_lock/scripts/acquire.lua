-- acquire: take (or re-enter) a fair lock, or wait in its queue. Redisson
-- RFairLock layout (queue helpers and the grant hash: queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (list)
-- KEYS[3]  the timeouts (zset)
-- KEYS[4]  the grants (hash)
-- KEYS[5]  the latch of this owner on this lock
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field: "<client-uuid>:<owner-id>"
-- ARGV[3]  now: the client's clock, epoch milliseconds (as Redisson)
-- ARGV[4]  thread wait in milliseconds: how long a waiter counts as alive
--          after it last showed up
-- ARGV[5]  1: wait in the queue if busy; 0: one try, never queued
--          (Redisson's tryLock() without a wait)
-- ARGV[6]  1: the client counts holds of this field already (it adopted
--          a grant); 0: it counts none
-- ARGV[7]  latch TTL in milliseconds
-- ARGV[8]  request id (also the waiter's grant nonce)
--
-- Steps:
--  1. A queued caller is alive (it is calling): its liveness sign and
--     score are refreshed (`keep_alive` in queue.lua), before anything
--     is purged.
--  2. Purge gone waiters at the head.
--  3. The lock was granted to the caller (`!granted`) and its client
--     counts no hold (the grant message was lost or not read yet): take
--     the grant as a fresh acquire: count 1, TTL raised to the lease,
--     reply {1, 1}. The marker goes either way (a client that counts
--     holds adopted the grant: then this is a re-entry, step 5).
--  4. Free, and nobody queued or the caller heads the queue: take it (pop
--     the caller, drop its timeout and grant entry, shift the other
--     timeouts, see queue.lua), reply {1, 1}.
--  5. The caller holds it: re-enter, reply {1, count}; a queue entry it
--     still has (another wait of the same owner) is dropped.
--  6. Otherwise, busy: queue the caller at the tail (ARGV[5] = 1) if it is
--     not queued yet (score: see queue.lua), record its grant entry
--     "<lease>:<request id>:<alive until>" (a release may then hand it the
--     lock), and reply {0, hint}: the lock's PTTL if held (-1: no
--     expiry), or, when it is free and another waiter heads the queue,
--     the time until that waiter's deadline (then it may be purged).
--
-- The key's TTL is raised to the lease, never lowered.
--
-- Retry policy: idempotent by request id; re-sent with the same rid until
-- a reply arrives (core/call.rs).
local function body()
    -- Nobody queued, no grant pending (neither the queue nor the grant
    -- hash exists) and the lock free: take it (steps 1-4 have nothing to
    -- do). The uncontended case, in four commands.
    if redis.call('exists', KEYS[2], KEYS[4]) == 0 and redis.call('pttl', KEYS[1]) == -2 then
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1, 1}
    end
    local now = tonumber(ARGV[3])
    local wait = tonumber(ARGV[4])
    local waits = ARGV[5] == '1'
    local queued = redis.call('zscore', KEYS[3], ARGV[2])
    if queued and waits then
        keep_alive(KEYS[2], KEYS[3], KEYS[4], ARGV[2], now, wait)
    end
    local head, marker = purge(KEYS[1], KEYS[2], KEYS[3], KEYS[4], now)
    if marker_of(marker) == ARGV[2] then
        redis.call('hdel', KEYS[4], '!granted')
        if ARGV[6] ~= '1' then
            redis.call('hset', KEYS[1], ARGV[2], 1)
            if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
                redis.call('pexpire', KEYS[1], ARGV[1])
            end
            return {1, 1}
        end
    end
    local pttl = redis.call('pttl', KEYS[1])
    if pttl == -2 and ((not head) or head == ARGV[2]) then
        if head then
            redis.call('lpop', KEYS[2])
        end
        redis.call('zrem', KEYS[3], ARGV[2])
        redis.call('hdel', KEYS[4], ARGV[2])
        shift(KEYS[3], now, wait)
        tidy(KEYS[1], KEYS[2], KEYS[4])
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1, 1}
    end
    if pttl ~= -2 and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
        local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
        if pttl < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[1], ARGV[1])
        end
        if queued and waits then
            redis.call('lrem', KEYS[2], 0, ARGV[2])
            redis.call('zrem', KEYS[3], ARGV[2])
            redis.call('hdel', KEYS[4], ARGV[2])
            tidy(KEYS[1], KEYS[2], KEYS[4])
        end
        return {1, count}
    end
    if not waits then
        return {0, pttl}
    end
    local tail = redis.call('llen', KEYS[2])
    if redis.call('zadd', KEYS[3], 'nx', now + wait + (tail + 1) * JAVA_WAIT, ARGV[2]) == 1 then
        redis.call('rpush', KEYS[2], ARGV[2])
    end
    redis.call('hset', KEYS[4], ARGV[2], ARGV[1] .. ':' .. ARGV[#ARGV] .. ':' .. (now + wait))
    if pttl ~= -2 then
        return {0, pttl}
    end
    local first = deadline(KEYS[3], KEYS[4], head) or now
    return {0, math.max(0, math.floor(first - now))}
end
