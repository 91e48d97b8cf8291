-- renew_read: extend many read leases in one call (the watchdog's batch),
-- or check that they are still held. Redisson's ReadLockTask does the
-- same for its read locks.
--
-- KEYS[2i-1]  a lock hash
-- KEYS[2i]    the owner's timeout prefix on it: "{name}:<field>:rwlock_timeout"
-- ARGV[1]     the batch's nonce, echoed first in the reply
-- ARGV[2]     0 only checks the fields; otherwise each entry is renewed
-- ARGV[2i+1]  the owner's read field on KEYS[2i-1]
-- ARGV[2i+2]  the TTL in milliseconds the owner's holds need: the
--             watchdog timeout, or what is left of its fixed leases (0:
--             only check)
--
-- For a field with count c, the timeout keys <prefix>:1..c and the hash
-- are raised to the entry's TTL, never lowered (a missing timeout key is
-- made again). Fixed leases are renewed too, up to their end: a Java
-- co-reader's renewal sets the hash's TTL to Redisson's watchdog timeout,
-- which may be shorter than what our fixed lease needs.
-- Reply: {nonce, the indices i whose field is gone}.
--
-- Retry policy: idempotent; the watchdog does not retry within a cycle.
local renew = tonumber(ARGV[2]) > 0
for i = 1, (#ARGV - 2) / 2 do
    local key, prefix = KEYS[2 * i - 1], KEYS[2 * i]
    local count = tonumber(redis.call('hget', key, ARGV[2 * i + 1]))
    local ttl = renew and tonumber(ARGV[2 * i + 2]) or 0
    if count and count > 0 then raise_reads(key, prefix, count, ttl) else lost(i) end
end
return verdict()
