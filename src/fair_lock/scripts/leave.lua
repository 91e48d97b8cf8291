-- leave: a waiter that stopped waiting (timed out, failed, dropped) leaves
-- the queue at once (Redisson's acquireFailed: the timeouts of the
-- waiters behind it move one Java wait earlier), unless a newer
-- wait of the same owner has queued the field since (its try re-wrote the
-- grant entry with a later request id: the place is that wait's). If a
-- release had already granted it the lock and its client never counted
-- that hold (a wait dropped right as the grant ran), the hold is given
-- back. If the waiter headed the queue of a free lock (or gave it back),
-- the lock is handed to the new head (queue helpers: queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (list)
-- KEYS[3]  the timeouts (zset)
-- KEYS[4]  the channel stem: "redisson_lock__channel:{<name>}"
-- KEYS[5]  the grants (hash)
-- KEYS[6]  the request record of this owner on this lock (see
--          core/scripts/record_prologue.lua)
-- ARGV[1]  the waiter's field
-- ARGV[2]  now: the client's clock, epoch milliseconds
-- ARGV[3]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[4]  1: the client counts holds of this field (never give back)
-- ARGV[5]  thread wait in milliseconds (see acquire.lua)
-- ARGV[6]  grant lease in milliseconds
-- ARGV[7]  the first request id of this wait's tries
-- ARGV[8]  the last request id of this wait's tries (a grant is given
--          back only if its nonce is one of this wait's: a leave of an
--          older wait of the same owner must not give back a grant to a
--          newer one). The leave of the owner's last wait, run under the
--          owner's turn, passes 0 and the largest id: whatever entry or
--          grant of the field is left is its to give back.
-- ARGV[9]  record TTL in milliseconds
-- ARGV[10] request id: taken under the owner's turn after the wait's
--          tries, so it is newer than all of them and older than any try
--          of a later wait of the owner
--
-- Reply (after the rid): {1, received, timeout, granted} the new head
-- was told (see hand_over_next), {2, received, timeout, granted} a grant was
-- given back and the lock handed on, {0, -1, -1, 0} nobody needed
-- telling.
--
-- Retry policy: recorded (idempotent by request id). A re-send replays the
-- first run's reply; a copy that arrives after a later wait of the same
-- owner tried (its request id is newer) never runs, so it cannot give
-- back a grant that wait adopted (under the turn, "any nonce" counts).
local function body()
    local now = tonumber(ARGV[2])
    local head = redis.call('lindex', KEYS[2], 0)
    -- The entry is this wait's unless a try of a newer wait of the same owner
    -- wrote it (its request id is past this wait's last): then the place in
    -- the queue is that wait's, and stays.
    local _, nonce_written = entry_of(KEYS[5], ARGV[1])
    local written = tonumber(nonce_written)
    if not (written and written > tonumber(ARGV[8])) then
        local at = redis.call('lpos', KEYS[2], ARGV[1])
        if at then
            local behind = {}
            for _, field in ipairs(redis.call('lrange', KEYS[2], at + 1, -1)) do
                behind[field] = true
            end
            redis.call('lrem', KEYS[2], 0, ARGV[1])
            shift(KEYS[3], now, tonumber(ARGV[5]), behind)
        end
        redis.call('zrem', KEYS[3], ARGV[1])
        redis.call('hdel', KEYS[5], ARGV[1])
    end
    local status = 1
    local granted, nonce = granted_to(KEYS[5])
    if ARGV[4] ~= '1' and granted == ARGV[1] and nonce and nonce >= tonumber(ARGV[7])
        and nonce <= tonumber(ARGV[8]) and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
        redis.call('hdel', KEYS[5], '!granted')
        -- Only the grant's own hold goes: a count above 1 means a request
        -- of this owner through another kind sharing the field (a plain
        -- or read lock) re-entered the granted field meanwhile, and its
        -- hold stays (issue 44: a kind-switching owner in the random
        -- history).
        if tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0') > 1 then
            redis.call('hincrby', KEYS[1], ARGV[1], -1)
        else
            redis.call('hdel', KEYS[1], ARGV[1])
        end
        head = ARGV[1]
        status = 2
    end
    if head == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
        local received, timeout, granted = hand_over_next(KEYS[1], KEYS[2], KEYS[3], KEYS[5],
            KEYS[4], ARGV[3], now, tonumber(ARGV[5]), tonumber(ARGV[6]))
        if received >= 0 or status == 2 then
            return {status, received, timeout, granted}
        end
    end
    tidy(KEYS[1], KEYS[2], KEYS[5])
    return {0, -1, -1, 0}
end
