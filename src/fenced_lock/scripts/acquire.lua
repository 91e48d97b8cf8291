-- acquire: take (or re-enter) a fenced lock and a new fencing token,
-- Redisson RFencedLock layout.
--
-- KEYS[1]  the lock hash (the plain lock's: same field, same count)
-- KEYS[2]  the token counter: "redisson_lock_token:{<name>}"
-- KEYS[#KEYS]  the request record of this owner on this lock (see
--          core/scripts/record_prologue.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field: "<client-uuid>:<owner-id>"
-- KEYS[3]  with ARGV[4] set only: the channel to announce a take of the
--          free lock on (as lock/scripts/acquire.lua)
-- ARGV[3]  the client's count (lock/scripts/acquire.lua; not read here)
-- ARGV[4]  "publish" or "spublish" to announce a take of the free lock
--          on KEYS[3], or "": no announcement
-- ARGV[#ARGV - 1]  record TTL in milliseconds
-- ARGV[#ARGV]      request id
--
-- Reply (after the rid the request record puts in front): {1, count, token} when the
-- caller now holds the lock (its hold count, now `count`, went up by one)
-- and took `token`, or {0, pttl} (from acquire_check.lua): someone else
-- holds it for pttl more milliseconds (-1: the key has no expiry). Every acquire, a re-entry too,
-- takes a new token. The counter is never given a TTL: tokens must never
-- go backwards. The INCR comes first, so a counter that is not an integer
-- fails the script before anything is written. The lock key's TTL is
-- raised to the lease, never lowered, as in lock/scripts/acquire.lua.
--
-- Taking the free lock with ARGV[4] set also publishes "<lease> <field>"
-- on KEYS[3] (a channel only leasehold listens on, core/takes.rs).
--
-- Retry policy: idempotent by request id; re-sent with the same rid until
-- a reply arrives (core/call.rs). A replay returns the token first taken.
-- Sent after acquire_check.lua (a refused try touches no record).
local function body()
    local pttl = found.pttl
    -- acquire_check.lua read `pttl` and answered a lock someone else
    -- holds: here the key is free (pttl -2) or holds the owner's field.
    local token = redis.call('incr', KEYS[2])
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if pttl < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    if pttl == -2 and ARGV[4] ~= '' then
        redis.call(ARGV[4], KEYS[3], ARGV[1] .. ' ' .. ARGV[2])
    end
    return {1, count, token}
end
