-- force_unlock: free a lock whoever holds it.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  "publish", or "spublish" for sharded pub/sub on a cluster
--
-- Returns 1 when a lock was deleted (and waiters were told), 0 otherwise.
--
-- Retry policy: idempotent in effect (a second DEL finds nothing), but not
-- retried: the caller sees the error.
if redis.call('del', KEYS[1]) == 1 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
