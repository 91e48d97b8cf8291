-- renew_packed: renew.lua for a single server, with the whole batch in one
-- argument. The keys are not declared (a single server does not need
-- them to route the call), so the client sends one packed string instead
-- of two values per lease (core/pack.rs).
--
-- ARGV[1]  the batch's nonce, echoed first in the reply
-- ARGV[2]  TTL in milliseconds; 0 only checks the fields
-- ARGV[3]  a MessagePack array: key 1, field 1, key 2, field 2, ...
--
-- Reply: {nonce, the indices i whose field is gone (the lease was lost)}.
-- A TTL is raised to ARGV[2], never lowered (core/scripts/renew_batch.lua
-- comes first: gone, lost, raise).
--
-- Retry policy: idempotent; the watchdog does not retry within a cycle.
local ttl = tonumber(ARGV[2])
local entries = cmsgpack.unpack(ARGV[3])
for i = 1, #entries / 2 do
    local key = entries[2 * i - 1]
    if redis.call('hexists', key, entries[2 * i]) == 1 then raise(key, ttl) else lost(i) end
end
return verdict()
