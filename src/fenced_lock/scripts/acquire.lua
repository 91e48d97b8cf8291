-- acquire: take (or re-enter) a fenced lock and a new fencing token,
-- Redisson RFencedLock layout.
--
-- KEYS[1]  the lock hash (the plain lock's: same field, same count)
-- KEYS[2]  the token counter: "redisson_lock_token:{<name>}"
-- KEYS[#KEYS]  the request record of this owner on this lock (see
--          core/scripts/record_prologue.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field: "<client-uuid>:<owner-id>"
-- ARGV[3], ARGV[4]  as for lock/scripts/acquire.lua (the client's count,
--          the announce command), sent by the plain lock's target and
--          not read here: this script announces no take
-- ARGV[#ARGV - 1]  record TTL in milliseconds
-- ARGV[#ARGV]      request id
--
-- Reply (after the rid the request record puts in front): {1, count, token} when the
-- caller now holds the lock (its hold count, now `count`, went up by one)
-- and took `token`, or {0, pttl}: someone else holds it for pttl more
-- milliseconds (-1: the key has no expiry). Every acquire, a re-entry too,
-- takes a new token. The counter is never given a TTL: tokens must never
-- go backwards. The INCR comes first, so a counter that is not an integer
-- fails the script before anything is written. The lock key's TTL is
-- raised to the lease, never lowered, as in lock/scripts/acquire.lua.
--
-- Retry policy: idempotent by request id; re-sent with the same rid until
-- a reply arrives (core/call.rs). A replay returns the token first taken.
local function body()
    if (redis.call('exists', KEYS[1]) == 0)
        or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
        local token = redis.call('incr', KEYS[2])
        local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
        if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
            redis.call('pexpire', KEYS[1], ARGV[1])
        end
        return {1, count, token}
    end
    return {0, redis.call('pttl', KEYS[1])}
end
