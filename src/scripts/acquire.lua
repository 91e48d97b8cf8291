-- acquire: take (or re-enter) a reentrant lock.
--
-- KEYS[1]  the lock hash (Redisson RLock layout)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field: "<client-uuid>:<task-id>"
--
-- Returns nil when the caller now holds the lock (its hold count went up by
-- one and the lease was reset), otherwise the lock's PTTL in milliseconds
-- (-1: the key has no expiry).
--
-- Retry policy: never re-sent blindly. A NOSCRIPT reply proves it did not
-- run; any other failure leaves the outcome unknown to the caller.
if (redis.call('exists', KEYS[1]) == 0)
    or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
