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
-- A TTL is raised to ARGV[2], never lowered (core/scripts/renew_batch.lua
-- comes first: gone, lost, raise).
--
-- Retry policy: idempotent; the watchdog does not retry within a cycle.
local ttl = tonumber(ARGV[2])
for i = 1, #KEYS do
    if redis.call('hexists', KEYS[i], ARGV[i + 2]) == 1 then raise(KEYS[i], ttl) else lost(i) end
end
return verdict()
