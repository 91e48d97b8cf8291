-- write_acquire: take (or re-enter) the write hold, Redisson
-- RReadWriteLock layout.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the request record of this owner's write lease
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  write field: "<uuid>:<id>:write"
-- ARGV[3]  record TTL in milliseconds
-- ARGV[4]  request id
--
-- Taken when the hash has no mode (free), or mode "write" with this
-- owner's write field (re-entry). The write count goes up by one and the
-- hash's TTL is raised to the lease, never lowered (Redisson adds the
-- lease to the TTL left on re-entry; see the module docs). Reply (after
-- the rid): {1, count}, or {0, pttl} when readers or another writer hold
-- it for pttl more milliseconds (-1: no expiry).
--
-- Retry policy: idempotent by request id.
local function body()
    local lease = tonumber(ARGV[1])
    local mode = redis.call('hget', KEYS[1], 'mode')
    if mode == false then
        redis.call('hset', KEYS[1], 'mode', 'write')
    elseif mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
        return {0, redis.call('pttl', KEYS[1])}
    end
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    if redis.call('pttl', KEYS[1]) < lease then
        redis.call('pexpire', KEYS[1], lease)
    end
    return {1, count}
end
