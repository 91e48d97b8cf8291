-- renew_read: extend many read leases in one call (the watchdog's batch),
-- or check that they are still held. Redisson's ReadLockTask does the
-- same for its read locks.
--
-- KEYS[2i-1]  a lock hash
-- KEYS[2i]    the owner's timeout prefix on it: "{name}:<field>:rwlock_timeout"
-- ARGV[1]     the batch's nonce, echoed first in the reply
-- ARGV[2]     TTL in milliseconds; 0 only checks the fields
-- ARGV[i+2]   the owner's read field on KEYS[2i-1]
--
-- For a field with count c, the timeout keys <prefix>:1..c and the hash
-- are raised to ARGV[2], never lowered (a missing timeout key is made
-- again). Reply: {nonce, the indices i whose field is gone}.
--
-- Retry policy: idempotent; the watchdog does not retry within a cycle.
local gone = {tonumber(ARGV[1])}
local ttl = tonumber(ARGV[2])
for i = 1, #ARGV - 2 do
    local key, prefix = KEYS[2 * i - 1], KEYS[2 * i]
    local count = tonumber(redis.call('hget', key, ARGV[i + 2]))
    if count and count > 0 then
        if ttl > 0 then
            for n = 1, count do
                if redis.call('pttl', prefix .. ':' .. n) < ttl then
                    redis.call('set', prefix .. ':' .. n, 1, 'px', ttl)
                end
            end
            if redis.call('pttl', key) < ttl then
                redis.call('pexpire', key, ttl)
            end
        end
    else
        gone[#gone + 1] = i
    end
end
return gone
