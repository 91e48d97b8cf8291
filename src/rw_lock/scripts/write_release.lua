-- write_release: give back write holds, Redisson RReadWriteLock layout.
-- Runs after timeouts.lua and take_holds.lua.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel: "redisson_rwlock:{name}"
-- KEYS[3]  every holder's key prefix: "{name}" ("name" if it has braces)
-- KEYS[4]  the request record of this owner's write lease
-- ARGV[1]  TTL in milliseconds the owner's remaining write holds need
-- ARGV[2]  write field
-- ARGV[3]  how many holds to give back (1; every hold still counted on the owner's last release, or on shutdown)
-- ARGV[4]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[5]  record TTL in milliseconds
-- ARGV[6]  request id
--
-- In mode "write" every field is this owner's (its write count, and read
-- counts it took while writing). With write holds left, the hash's TTL
-- becomes the longest of ARGV[1] and the read holds' timeout keys. With
-- none left: an empty hash is deleted and "1" published (wakes every
-- waiter: readers and writers); a hash with the owner's read holds turns
-- to mode "read", keeps the TTL those holds' timeout keys need, and "1"
-- is published too, so readers elsewhere get in (Redisson publishes
-- nothing there).
--
-- Reply (after the rid): {0} not held (nothing changed; with no hash at
-- all, "1" is published as Redisson does), {1, left} write holds remain,
-- {2} this owner's write holds are all given back.
--
-- Retry policy: idempotent by request id.
local function body()
    local mode, _, left = take_holds('1', 'write')
    if mode == nil then
        return {0}
    end
    if left > 0 then
        local ttl = math.max(tonumber(ARGV[1]), longest_read_timeout(KEYS[1], KEYS[3]))
        redis.call('pexpire', KEYS[1], ttl)
        return {1, left}
    end
    redis.call('hdel', KEYS[1], ARGV[2])
    if redis.call('hlen', KEYS[1]) <= 1 then
        redis.call('del', KEYS[1])
    else
        redis.call('hset', KEYS[1], 'mode', 'read')
        local longest = longest_read_timeout(KEYS[1], KEYS[3])
        if longest > 0 then
            redis.call('pexpire', KEYS[1], longest)
        end
    end
    redis.call(ARGV[4], KEYS[2], '1')
    return {2}
end
