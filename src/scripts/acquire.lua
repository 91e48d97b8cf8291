-- acquire: take (or re-enter) a reentrant lock.
--
-- KEYS[1]  the lock hash (Redisson RLock layout)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field: "<client-uuid>:<owner-id>"
--
-- Returns {1, count} when the caller now holds the lock (its hold count,
-- now `count`, went up by one and the lease was reset), otherwise
-- {0, pttl}: the lock's remaining time to live in milliseconds (-1: the key
-- has no expiry). Redisson's own script returns nil / pttl; the count lets
-- the client see that a hold it still counted had expired (count 1).
--
-- Retry policy: never re-sent blindly. A NOSCRIPT reply proves it did not
-- run; after any other failure the client reads the field's count to learn
-- whether it ran (see holds.rs).
if (redis.call('exists', KEYS[1]) == 0)
    or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, count}
end
return {0, redis.call('pttl', KEYS[1])}
