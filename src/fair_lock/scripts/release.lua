-- release: give back holds of a fair lock; when freed, hand it to the
-- head waiter. Redisson RFairLock layout (queue helpers: queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (list)
-- KEYS[3]  the timeouts (zset)
-- KEYS[4]  the channel stem: "redisson_lock__channel:{<name>}"
-- KEYS[5]  the grants (hash)
-- KEYS[6]  the request record of this owner on this lock
-- ARGV[1]  TTL in milliseconds the key keeps while holds remain
-- ARGV[2]  owner field
-- ARGV[3]  how many holds to give back (1; every hold still counted on the owner's last release, or on shutdown)
-- ARGV[4]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[5]  now: the client's clock, epoch milliseconds
-- ARGV[6]  thread wait in milliseconds (see acquire.lua)
-- ARGV[7]  grant lease in milliseconds: the most a grant's TTL is
-- ARGV[8]  the hold count the client expects before this release, or 0:
--          read and write the record as always (release_check.lua)
-- ARGV[9]  record TTL in milliseconds
-- ARGV[10] request id
--
-- A grant marker of the caller's field goes (its client counts the hold:
-- it adopted it); when the lock is freed, gone waiters at the head are
-- purged on the way to the first one still there (`hand_over_next` in
-- queue.lua), and the marker is replaced or dropped. Reply
-- (after the rid): {0, received, timeout, granted} the field is missing
-- (nothing given back; if the lock is free it is handed over, as
-- Redisson's unlock tells the head; only when the record is read: with
-- the client's count known, release_check.lua answers {0} and changes
-- nothing), {1, left} holds remain,
-- {2, received, timeout, granted} the lock was freed and handed over
-- (see hand_over_next in queue.lua: `received` -1 when nobody waits;
-- `granted` 1 when the head was made the holder, then followed by the
-- nonce, the grant's TTL and the granted field; see `told`); {3} (from
-- release_check.lua) the field is gone where this release would have
-- freed it: freed by a copy of it that already ran, or lost before;
-- nothing changed.
--
-- Retry policy: idempotent by the count the client expects (a copy finds
-- the count its first run left, or the field gone, and changes nothing:
-- release_check.lua), and by request id when that count is unknown (a
-- re-send never gives back a hold twice).
--
-- Commands (after release_check.lua's HGET; neither reads nor writes the
-- request record when the field holds the count the client expects): the
-- last hold of a lock nobody waits for LPOP (nil), DEL (the lock and the
-- grant hash); a handoff to a live leasehold waiter LPOP, DEL, HGET (its
-- entry), HSET, PEXPIRE (the grant), ZPOPMIN, ZADD (timeouts), HDEL, HSET
-- (its entry and the marker), PUBLISH; an inner hold HSET, PEXPIRE, HGET
-- (the marker).

-- The reply of a release that handed the lock over: {status, received,
-- timeout, granted}, and after a grant the nonce, the grant's TTL and last
-- the granted field (a string: a client of the releaser's process hands
-- the waiter its message itself; a request record replay drops it).
local function told(status, received, timeout, granted, head, nonce, ms)
    if granted == 1 then
        return {status, received, timeout, 1, nonce, ms, head}
    end
    return {status, received, timeout, granted}
end

local function body()
    local count = found.count
    -- `count` was read by release_check.lua.
    local now = tonumber(ARGV[5])
    local wait = tonumber(ARGV[6])
    local grant_ms = tonumber(ARGV[7])
    if not count then
        if redis.call('exists', KEYS[1]) == 0 then
            return told(0, hand_over_next(KEYS[1], KEYS[2], KEYS[3], KEYS[5],
                KEYS[4], ARGV[4], now, wait, grant_ms))
        end
        return {0, -1, -1, 0}
    end
    local left = tonumber(count) - tonumber(ARGV[3])
    if left > 0 then
        redis.call('hset', KEYS[1], ARGV[2], left)
        redis.call('pexpire', KEYS[1], ARGV[1])
        if granted_to(KEYS[5]) == ARGV[2] then
            redis.call('hdel', KEYS[5], '!granted')
        end
        return {1, left}
    end
    -- The last hold. Nobody queued (the common uncontended case): the
    -- lock goes, with the grant hash (stale entries, this owner's marker)
    -- if there is one, in one DEL.
    local head = redis.call('lpop', KEYS[2])
    if not head then
        redis.call('del', KEYS[1], KEYS[5])
        return {2, -1, -1, 0}
    end
    redis.call('del', KEYS[1])
    return told(2, hand_over_next(KEYS[1], KEYS[2], KEYS[3], KEYS[5],
        KEYS[4], ARGV[4], now, wait, grant_ms, head))
end
