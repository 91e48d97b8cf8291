-- read_release: give back read holds, Redisson RReadWriteLock layout.
-- Runs after timeouts.lua and take_holds.lua.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel: "redisson_rwlock:{name}"
-- KEYS[3]  this owner's timeout prefix: "{name}:<uuid>:<id>:rwlock_timeout"
-- KEYS[4]  every holder's key prefix: "{name}" ("name" if it has braces)
-- KEYS[5]  the request record of this owner's read lease
-- ARGV[1]  TTL in milliseconds the owner's remaining read holds need
-- ARGV[2]  read field
-- ARGV[3]  how many holds to give back (1; every hold still counted on the owner's last release, or on shutdown)
-- ARGV[4]  "publish", or "spublish" for sharded pub/sub on a cluster
-- ARGV[5]  record TTL in milliseconds
-- ARGV[6]  request id
--
-- The count goes down from c to left; the timeout keys left+1..c go, and
-- the keys 1..left are set to ARGV[1] (what the remaining holds need, so
-- a Java read unlock, which derives the hash's TTL from every holder's
-- timeout keys, keeps the hash for them). Then, in mode "read", the
-- hash's TTL becomes the longest timeout key of any holder, or, if none
-- lives, the hash is deleted and "0" published (Redisson's read unlock).
-- In mode "write" (this owner also writes) the hash's TTL stays: the
-- write holds' need is not in any timeout key.
--
-- Reply (after the rid): {0} not held (nothing changed; with no hash at
-- all, "0" is published as Redisson does), {1, left} holds remain, {2}
-- this owner's read holds are all given back.
--
-- Retry policy: idempotent by request id.
local function body()
    local mode, held, left = take_holds('0', nil)
    if mode == nil then
        return {0}
    end
    if left <= 0 then
        left = 0
        redis.call('hdel', KEYS[1], ARGV[2])
    end
    for n = left + 1, held do
        redis.call('del', KEYS[3] .. ':' .. n)
    end
    for n = 1, left do
        redis.call('set', KEYS[3] .. ':' .. n, 1, 'px', ARGV[1])
    end
    local reply = {2}
    if left > 0 then
        reply = {1, left}
    end
    if mode == 'write' then
        return reply
    end
    if redis.call('hlen', KEYS[1]) > 1 then
        local longest = longest_read_timeout(KEYS[1], KEYS[4])
        if longest > 0 then
            redis.call('pexpire', KEYS[1], longest)
            return reply
        end
    end
    redis.call('del', KEYS[1])
    redis.call(ARGV[4], KEYS[2], '0')
    return reply
end
