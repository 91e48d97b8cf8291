-- release: give back holds of a reentrant lock, Redisson RLock layout.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the unlock channel: "redisson_lock__channel:{<name>}"
-- KEYS[3]  the request record of this owner on this lock
-- ARGV[1]  TTL in milliseconds the key keeps while holds remain: the
--          longest deadline of the owner's remaining live holds
-- ARGV[2]  owner field
-- ARGV[3]  how many holds to give back (1; every hold still counted on the owner's last release, or on shutdown)
-- ARGV[4]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[5]  the hold count expected before this release (release_check.lua)
-- ARGV[6]  record TTL in milliseconds
-- ARGV[7]  request id
--
-- Reply (beside the rid, as acquire.lua's): {0} the field is missing (the caller does not
-- hold the lock; nothing changed), {1, left} holds remain, {2} the lock
-- was freed: key deleted and "0" published, as Redisson's unlock does;
-- {3} (from release_check.lua) the field is gone where this release would
-- have freed it: freed by a copy of it that already ran, or lost before.
--
-- Retry policy: idempotent by the count the client expects (a copy finds
-- the count its first run left, release_check.lua), and by request id
-- when that count is unknown (a re-send never gives back a hold twice).
local function body()
    local count = found.count
    -- `count` was read by release_check.lua: the last hold costs HGET,
    -- DEL, PUBLISH; an inner one HGET, HSET, PEXPIRE.
    if not count then
        return {0}
    end
    local left = tonumber(count) - tonumber(ARGV[3])
    if left > 0 then
        redis.call('hset', KEYS[1], ARGV[2], left)
        redis.call('pexpire', KEYS[1], ARGV[1])
        return {1, left}
    end
    redis.call('del', KEYS[1])
    redis.call(ARGV[4], KEYS[2], '0')
    return {2}
end
