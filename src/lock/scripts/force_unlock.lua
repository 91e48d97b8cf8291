-- force_unlock: free a lock whoever holds it.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel
-- KEYS[3]  this call's request record (see core/scripts/record_prologue.lua)
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[3]  request record TTL in milliseconds
-- ARGV[4]  request id
--
-- Reply (after the rid): {1} when a lock was deleted (and waiters were
-- told), {0} otherwise.
--
-- Retry policy: idempotent by request id (core/call.rs, `Call::run_once`):
-- a copy of the request that arrives again (fred re-sends what was in
-- flight after a reconnect) replays the first run's reply instead of
-- deleting a lock someone took after it.
local function body()
    if redis.call('del', KEYS[1]) == 1 then
        redis.call(ARGV[2], KEYS[2], ARGV[1])
        return {1}
    end
    return {0}
end
