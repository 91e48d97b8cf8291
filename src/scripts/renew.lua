-- renew: extend many leases in one call (the watchdog's batch).
--
-- KEYS[i]    a lock hash
-- ARGV[1]    lease in milliseconds
-- ARGV[i+1]  the owner field whose hold on KEYS[i] is renewed
--
-- Returns an array: 1 where the field was present and the lease was reset,
-- 0 where the field is gone (the lease was lost).
--
-- Retry policy: idempotent (PEXPIRE to the same lease), but the watchdog
-- does not retry within a cycle; the next cycle renews again.
local renewed = {}
for i = 1, #KEYS do
    if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
        redis.call('pexpire', KEYS[i], ARGV[1])
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
