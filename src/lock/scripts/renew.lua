-- renew: extend many hash leases in one call (the watchdog's batch), or
-- check that they are still held. Redisson's LockTask does the same for
-- RLock, RFairLock, RFencedLock and the write lock.
--
-- KEYS[i]    a lock hash
-- ARGV[1]    the batch's nonce, echoed first in the reply
-- ARGV[2]    TTL in milliseconds; 0 only checks the fields
-- ARGV[i+2]  the owner field whose hold on KEYS[i] is renewed
--
-- Reply: {nonce, the indices i whose field is gone (the lease was lost)}.
-- A TTL is raised to ARGV[2], never lowered, so a renewal cannot cut a
-- longer fixed lease of the same owner short.
--
-- Retry policy: idempotent; the watchdog does not retry within a cycle.
local gone = {tonumber(ARGV[1])}
local ttl = tonumber(ARGV[2])
for i = 1, #KEYS do
    if redis.call('hexists', KEYS[i], ARGV[i + 2]) == 1 then
        if ttl > 0 and redis.call('pttl', KEYS[i]) < ttl then
            redis.call('pexpire', KEYS[i], ttl)
        end
    else
        gone[#gone + 1] = i
    end
end
return gone
