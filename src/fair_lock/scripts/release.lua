-- release: give back holds of a fair lock; when freed, hand it to the
-- head waiter. Redisson RFairLock layout (queue helpers: queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (list)
-- KEYS[3]  the timeouts (zset)
-- KEYS[4]  the channel stem: "redisson_lock__channel:{<name>}"
-- KEYS[5]  the grants (hash)
-- KEYS[6]  the latch of this owner on this lock
-- ARGV[1]  TTL in milliseconds the key keeps while holds remain
-- ARGV[2]  owner field
-- ARGV[3]  how many holds to give back (1; all of them on shutdown)
-- ARGV[4]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[5]  now: the client's clock, epoch milliseconds
-- ARGV[6]  thread wait in milliseconds (see acquire.lua)
-- ARGV[7]  grant lease in milliseconds: the most a grant's TTL is
-- ARGV[8]  latch TTL in milliseconds
-- ARGV[9]  request id
--
-- Gone waiters at the head are purged first; a grant marker of the
-- caller's field goes (its client counts the hold: it adopted it). Reply
-- (after the rid): {0, received, timeout, granted} the field is missing
-- (nothing given back; if the lock is free it is handed over, as
-- Redisson's unlock tells the head), {1, left} holds remain,
-- {2, received, timeout, granted} the lock was freed and handed over
-- (see hand_over in queue.lua: `received` -1 when nobody waits;
-- `granted` 1 when the head was made the holder, then followed by the
-- nonce, the grant's TTL and the granted field; see `told`).
--
-- Retry policy: idempotent by request id (a re-send never gives back a
-- hold twice).

-- The reply of a release that handed the lock over: {status, received,
-- timeout, granted}, and after a grant the nonce, the grant's TTL and last
-- the granted field (a string: a client of the releaser's process hands
-- the waiter its message itself; a latch replay drops it).
local function told(status, received, timeout, granted, head, nonce, ms)
    if granted == 1 then
        return {status, received, timeout, 1, nonce, ms, head}
    end
    return {status, received, timeout, granted}
end

local function body()
    -- The last hold of a lock nobody waits for (neither the queue nor the
    -- grant hash exists: nothing to purge, tell or tidy): delete it.
    local held = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
    if held and held <= tonumber(ARGV[3]) and redis.call('exists', KEYS[2], KEYS[5]) == 0 then
        redis.call('del', KEYS[1])
        return {2, -1, -1, 0}
    end
    local now = tonumber(ARGV[5])
    local wait = tonumber(ARGV[6])
    local grant = tonumber(ARGV[7])
    local head, marker = purge(KEYS[1], KEYS[2], KEYS[3], KEYS[5], now)
    if not held then
        if redis.call('exists', KEYS[1]) == 0 then
            return told(0, hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[5],
                KEYS[4], ARGV[4], now, wait, grant, head))
        end
        return {0, -1, -1, 0}
    end
    if marker_of(marker) == ARGV[2] then
        redis.call('hdel', KEYS[5], '!granted')
    end
    -- `held` is still the count: the purge touches no lock field.
    local left = held - tonumber(ARGV[3])
    if left > 0 then
        redis.call('hincrby', KEYS[1], ARGV[2], -tonumber(ARGV[3]))
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1, left}
    end
    redis.call('del', KEYS[1])
    return told(2, hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[5],
        KEYS[4], ARGV[4], now, wait, grant, head))
end
