-- kick: after a release told (or granted) a head waiter that was not
-- listening (the message reached nobody: the waiter may be gone), the
-- releasing client runs this once that waiter's timeout (or the grant's
-- lease) has passed: if the lock is still free, purge gone waiters and
-- hand it to the first one still there (`hand_over_next` in queue.lua).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue (list)
-- KEYS[3]  the timeouts (zset)
-- KEYS[4]  the channel stem: "redisson_lock__channel:{<name>}"
-- KEYS[5]  the grants (hash)
-- ARGV[1]  now: the client's clock, epoch milliseconds
-- ARGV[2]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[3]  thread wait in milliseconds (see acquire.lua)
-- ARGV[4]  grant lease in milliseconds
--
-- Reply: {1, received, timeout, granted} a head was told (see
-- hand_over_next), {2, pttl, -1, 0} the lock is still held by a waiter it was
-- granted to, whose grant was not taken up by any script of its owner
-- (`!granted`): check again once its TTL has run out (the grant's end as
-- the kicker computed it can come a little before the key's, which
-- counts from when the release ran), {0, -1, -1, 0} the lock is held
-- otherwise, or nobody waits.
--
-- Retry policy: idempotent in effect (at most one more message to a head
-- that re-checks); not retried.
if redis.call('exists', KEYS[1]) == 0 then
    local received, timeout, granted = hand_over_next(KEYS[1], KEYS[2], KEYS[3], KEYS[5],
        KEYS[4], ARGV[2], tonumber(ARGV[1]), tonumber(ARGV[3]), tonumber(ARGV[4]))
    if received >= 0 then
        return {1, received, timeout, granted}
    end
else
    local field = granted_to(KEYS[5])
    if field and redis.call('hexists', KEYS[1], field) == 1 then
        return {2, redis.call('pttl', KEYS[1]), -1, 0}
    end
end
return {0, -1, -1, 0}
