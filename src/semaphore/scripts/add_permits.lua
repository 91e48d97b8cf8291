-- add_permits: add to the free count (a negative delta takes permits
-- away; the count may go below zero), as Redisson's addPermits.
--
-- KEYS[1]  the free permit count
-- KEYS[2]  the channel "redisson_sc:{name}"
-- KEYS[3]  this call's request record
-- ARGV[1]  the delta
-- ARGV[2]  "publish" or "spublish"
-- ARGV[3]  record TTL in milliseconds
-- ARGV[4]  request id
--
-- Reply (after the rid): {1}. A positive delta is published (up to that
-- many waiters per client may retry); nothing is published otherwise.
-- Unlike Redisson's GET + SET, INCRBY keeps a TTL the count key may have.
--
-- Retry policy: idempotent by request id (a re-send never adds twice).
local function body()
    redis.call('incrby', KEYS[1], ARGV[1])
    if tonumber(ARGV[1]) > 0 then
        redis.call(ARGV[2], KEYS[2], ARGV[1])
    end
    return {1}
end
