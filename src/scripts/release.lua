-- release: give back holds of a reentrant lock.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel: "redisson_lock__channel:{<name>}"
-- ARGV[1]  lease in milliseconds, set again while holds remain
-- ARGV[2]  owner field: "<client-uuid>:<task-id>"
-- ARGV[3]  unlock message ("0", as Redisson sends)
-- ARGV[4]  how many holds to give back (1 for an unlock; all of them on
--          shutdown)
-- ARGV[5]  "publish", or "spublish" for sharded pub/sub on a cluster
--
-- Returns nil when the field is missing (the caller does not hold the lock),
-- 0 when holds remain, 1 when the lock was freed (key deleted, message
-- published).
--
-- Retry policy: never re-sent blindly; a second run would give back a hold
-- twice. NOSCRIPT proves it did not run; after any other failure the client
-- reads the field's count and sends it again only if it did not run.
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
local count = redis.call('hincrby', KEYS[1], ARGV[2], -tonumber(ARGV[4]))
if count > 0 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[5], KEYS[2], ARGV[3])
return 1
