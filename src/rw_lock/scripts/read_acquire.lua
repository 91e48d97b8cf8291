-- read_acquire: take (or re-enter) a read hold, Redisson RReadWriteLock
-- layout.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  this owner's timeout prefix: "{name}:<uuid>:<id>:rwlock_timeout"
-- KEYS[3]  the request record of this owner's read lease (core/scripts/record_prologue.lua)
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  read field: "<uuid>:<id>"
-- ARGV[3]  the same owner's write field: "<uuid>:<id>:write"
-- ARGV[4]  record TTL in milliseconds
-- ARGV[5]  request id
--
-- Taken when the hash has no mode (free), mode "read" (other readers), or
-- mode "write" with this owner's write field (a writer may also read).
-- The read count goes up by one, to n; the hold's timeout key
-- KEYS[2]:<n> is set with the lease, and the hash's TTL is raised to the
-- lease, never lowered. Reply (after the rid): {1, n}, or {0, pttl} when
-- a writer holds it for pttl more milliseconds (-1: no expiry).
--
-- Retry policy: idempotent by request id; re-sent with the same rid until
-- a reply arrives (core/call.rs).
local function body()
    local lease = tonumber(ARGV[1])
    local mode = redis.call('hget', KEYS[1], 'mode')
    if mode == false then
        redis.call('hset', KEYS[1], 'mode', 'read')
    elseif mode ~= 'read'
        and not (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
        return {0, redis.call('pttl', KEYS[1])}
    end
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':' .. count, 1, 'px', lease)
    if redis.call('pttl', KEYS[1]) < lease then
        redis.call('pexpire', KEYS[1], lease)
    end
    return {1, count}
end
