-- force_unlock: free a read-write lock in the given mode, whoever holds it.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel: "redisson_rwlock:{name}"
-- KEYS[3]  every holder's key prefix: "{name}" ("name" if it has braces)
-- KEYS[4]  this call's request record (see core/scripts/record_prologue.lua)
-- ARGV[1]  the mode freed: "read" (the read lock's force unlock) or "write"
-- ARGV[2]  the message: "0" for read, "1" for write (Redisson's)
-- ARGV[3]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[4]  request record TTL in milliseconds
-- ARGV[5]  request id
--
-- Only a hash in mode ARGV[1] is deleted; then every holder's timeout keys
-- are deleted too (Redisson leaves them to expire) and ARGV[2] published.
-- Reply (after the rid): {1} when a lock was deleted, {0} otherwise.
--
-- Retry policy: idempotent by request id (core/call.rs, `Call::run_once`):
-- a copy that arrives again replays the first run's reply instead of
-- deleting a lock someone took after it.
local function body()
    if redis.call('hget', KEYS[1], 'mode') ~= ARGV[1] then
        return {0}
    end
    local fields = redis.call('hgetall', KEYS[1])
    for i = 1, #fields, 2 do
        local count = tonumber(fields[i + 1])
        if count then
            for n = 1, count do
                redis.call('del', KEYS[3] .. ':' .. fields[i] .. ':rwlock_timeout:' .. n)
            end
        end
    end
    redis.call('del', KEYS[1])
    redis.call(ARGV[3], KEYS[2], ARGV[2])
    return {1}
end
