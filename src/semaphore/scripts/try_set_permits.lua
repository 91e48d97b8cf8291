-- try_set_permits: set the free count if the semaphore is not set yet,
-- as Redisson's trySetPermits.
--
-- KEYS[1]  the free permit count
-- KEYS[2]  the channel "redisson_sc:{name}"
-- KEYS[3]  this call's request record
-- ARGV[1]  the permit count
-- ARGV[2]  "publish" or "spublish"
-- ARGV[3]  record TTL in milliseconds
-- ARGV[4]  request id
--
-- Reply (after the rid): {1} set, and the count published; {0} the
-- semaphore was already set, nothing changed.
--
-- Retry policy: idempotent by request id.
local function body()
    if redis.call('exists', KEYS[1]) == 1 then
        return {0}
    end
    redis.call('set', KEYS[1], ARGV[1])
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return {1}
end
