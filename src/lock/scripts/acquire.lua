-- acquire: take (or re-enter) a reentrant lock, Redisson RLock layout.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  with ARGV[4] set only: the channel to announce a take of the
--          free lock on ("leasehold_lock__taken:{<name>}", core/takes.rs)
-- KEYS[#KEYS]  the request record of this owner on this lock (see
--          core/scripts/record_prologue.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field: "<client-uuid>:<owner-id>"
-- ARGV[3]  the hold count the client counts before this acquire, or -1
--          (acquire_check.lua)
-- ARGV[4]  "publish" or "spublish" to announce a take of the free lock
--          on KEYS[2], or "": no announcement
-- ARGV[5]  record TTL in milliseconds
-- ARGV[6]  request id
--
-- Reply (beside the rid: in front in the recorded script's reply, last in
-- the twin's, core/script.rs): {1, count} when the caller
-- now holds the lock (its hold count, now `count`, went up by one), or
-- {0, pttl}: someone else holds it for pttl more milliseconds (-1: the key
-- has no expiry). The key's TTL is raised to the lease, never lowered:
-- the lock must not expire before the longest live hold of the owner.
-- Taking the free lock with ARGV[4] set also publishes "<lease> <field>"
-- on KEYS[2] (a channel only leasehold listens on: nothing Redisson
-- sees).
--
-- Retry policy: idempotent by request id; re-sent with the same rid until
-- a reply arrives (core/call.rs). Sent after acquire_check.lua (a refused
-- try touches no record).
local function body()
    local pttl = found.pttl
    -- `pttl` was read by acquire_check.lua, which answered a lock held by
    -- someone else and a copy that already ran: a new key costs PTTL,
    -- HINCRBY, PEXPIRE; a re-entry PTTL, HGET, HINCRBY (and PEXPIRE if the
    -- TTL must rise); a busy one PTTL, HGET. With the client's count
    -- matching Redis, no record is read or written.
    if pttl == -2 then
        redis.call('hincrby', KEYS[1], ARGV[2], 1)
        redis.call('pexpire', KEYS[1], ARGV[1])
        if ARGV[4] ~= '' then
            redis.call(ARGV[4], KEYS[2], ARGV[1] .. ' ' .. ARGV[2])
        end
        return {1, 1}
    end
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if pttl < tonumber(ARGV[1]) then
        redis.call('pexpire', KEYS[1], ARGV[1])
    end
    return {1, count}
end
