-- acquire: take (or re-enter) a fair lock, or wait in its queue. Redisson
-- RFairLock layout (queue helpers and the grant hash: queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (list)
-- KEYS[3]  the timeouts (zset)
-- KEYS[4]  the grants (hash)
-- KEYS[5]  the request record of this owner on this lock
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field: "<client-uuid>:<owner-id>"
-- ARGV[3]  now: the client's clock, epoch milliseconds (as Redisson)
-- ARGV[4]  thread wait in milliseconds: how long a waiter counts as alive
--          after it last showed up
-- ARGV[5]  1: wait in the queue if busy; 0: one try, never queued
--          (Redisson's tryLock() without a wait)
-- ARGV[6]  1: the client counts holds of this field already (it adopted
--          a grant); 0: it counts none
-- ARGV[7]  the hold count the client counts, or -1 (acquire_check.lua)
-- ARGV[8]  how the waiter is kept alive past its sign (see `alive_key`
--          in queue.lua): 0 it refreshes its own sign; 1 its client's
--          key for this lock (the entry is written with ':c'); 2 its
--          client's one key (':C')
-- ARGV[9]  record TTL in milliseconds
-- ARGV[10] request id (also the waiter's grant nonce)
--
-- Sent after acquire_check.lua, which read `pttl` and `count` and
-- answered a single try of a lock someone else holds, a copy that already
-- ran and a grant the client has not adopted (the field at one more than
-- the client counts). Steps:
--
--  1. The lock is free, nobody is queued and no grant is pending (neither
--     the queue nor the grant hash exists): take it.
--  2. The lock is free otherwise (`free` below): a queued caller is alive
--     (it is calling): its liveness sign and score are refreshed
--     (`keep_alive` in queue.lua) before gone waiters at the head are
--     purged. If nobody is queued then, or the caller heads the queue,
--     it takes the lock (popped, its timeout and grant entry dropped, the
--     other timeouts shifted: see queue.lua), reply {1, 1}; else it
--     queues as in step 5, and the reply's hint is the time until the
--     head's deadline (then it may be purged).
--  3. The caller holds it and the lock was granted to it while its
--     client counts no hold (`!granted` names it: the grant message was
--     lost or not read yet, and the client's count was not sent): take
--     the grant as a fresh acquire: count 1, TTL raised to the lease,
--     reply {1, 1}. The marker goes either way (a client that counts
--     holds adopted the grant: then this is a re-entry, step 4).
--  4. The caller holds it: re-enter, reply {1, count}; a queue entry it
--     still has (another wait of the same owner) is dropped.
--  5. Someone else holds it: queue the caller at the tail (ARGV[5] = 1)
--     if it is not queued yet, else refresh its liveness and score
--     (`join` below; score: see queue.lua), record its grant entry
--     "<lease>:<request id>:<alive until>" (a release may then hand it
--     the lock), and reply {0, pttl} (-1: no expiry). Nothing is purged:
--     the release that frees the lock does that.
--
-- The key's TTL is raised to the lease, never lowered.
--
-- Commands: a free lock nobody waits for PTTL, EXISTS, HSET, PEXPIRE; a
-- busy one, the caller not queued yet, PTTL, HGET, RPUSH, ZADD, HSET;
-- neither reads nor writes the request record when the client's count
-- matches Redis (acquire_check.lua).
--
-- Retry policy: idempotent by request id; re-sent with the same rid until
-- a reply arrives (core/call.rs).

-- Queues `field` at the tail, or, queued already, refreshes its place
-- (what `keep_alive` does). The push comes first: its reply is the
-- position the score needs (no LLEN), and the ZADD NX that follows tells
-- whether the field was queued already, in which case the push is undone.
local function join(queue, timeouts, field, now, wait)
    local n = redis.call('rpush', queue, field)
    if redis.call('zadd', timeouts, 'nx', now + wait + n * JAVA_WAIT, field) == 0 then
        local pos = redis.call('lpos', queue, field)
        if pos < n - 1 then
            redis.call('rpop', queue)
        end
        redis.call('zadd', timeouts, now + wait + (pos + 1) * JAVA_WAIT, field)
    end
end

-- The caller's grant entry (see queue.lua): lease, request id (the
-- grant nonce), alive-until, and ':c' or ':C' when its client keeps it
-- alive.
local function entry(now, wait)
    local kept = ''
    if ARGV[8] == '1' then
        kept = ':c'
    elseif ARGV[8] == '2' then
        kept = ':C'
    end
    return ARGV[1] .. ':' .. ARGV[#ARGV] .. ':' .. (now + wait) .. kept
end

-- Step 2 (the lock is free, and the queue or the grant hash exists).
local function free(now, wait, waits)
    if waits and redis.call('zscore', KEYS[3], ARGV[2]) then
        keep_alive(KEYS[2], KEYS[3], KEYS[4], ARGV[2], now, wait)
    end
    local head = purge(KEYS[1], KEYS[2], KEYS[3], KEYS[4], now)
    if (not head) or head == ARGV[2] then
        if head then
            redis.call('lpop', KEYS[2])
        end
        shift_out(KEYS[3], now, wait, ARGV[2])
        redis.call('hdel', KEYS[4], ARGV[2])
        tidy(KEYS[1], KEYS[2], KEYS[4])
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1, 1}
    end
    if not waits then
        return {0, -2}
    end
    join(KEYS[2], KEYS[3], ARGV[2], now, wait)
    redis.call('hset', KEYS[4], ARGV[2], entry(now, wait))
    local first = deadline(KEYS[3], KEYS[4], head, now) or now
    return {0, math.max(0, math.floor(first - now))}
end

local function body()
    local pttl, count = found.pttl, found.count
    if pttl == -2 and redis.call('exists', KEYS[2], KEYS[4]) == 0 then
        redis.call('hset', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1, 1}
    end
    local now = tonumber(ARGV[3])
    local wait = tonumber(ARGV[4])
    local waits = ARGV[5] == '1'
    if pttl == -2 then
        return free(now, wait, waits)
    end
    if count then
        if granted_to(KEYS[4]) == ARGV[2] then
            redis.call('hdel', KEYS[4], '!granted')
            if ARGV[6] ~= '1' then
                redis.call('hset', KEYS[1], ARGV[2], 1)
                if pttl < tonumber(ARGV[1]) then
                    redis.call('pexpire', KEYS[1], ARGV[1])
                end
                return {1, 1}
            end
        end
        local held = redis.call('hincrby', KEYS[1], ARGV[2], 1)
        if pttl < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[1], ARGV[1])
        end
        if waits and redis.call('zscore', KEYS[3], ARGV[2]) then
            redis.call('lrem', KEYS[2], 0, ARGV[2])
            redis.call('zrem', KEYS[3], ARGV[2])
            redis.call('hdel', KEYS[4], ARGV[2])
            tidy(KEYS[1], KEYS[2], KEYS[4])
        end
        return {1, held}
    end
    if not waits then
        return {0, pttl}
    end
    join(KEYS[2], KEYS[3], ARGV[2], now, wait)
    redis.call('hset', KEYS[4], ARGV[2], entry(now, wait))
    return {0, pttl}
end
